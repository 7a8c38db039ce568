"""Qwen-Image's MMDiT, keys as ComfyUI and diffusers both name them (Qwen-Image was released in
diffusers' naming; Comfy-Org's repacks keep it): ``img_in``, ``txt_norm``, ``txt_in``,
``time_text_embed.timestep_embedder.linear_{1,2}``, ``transformer_blocks.N.{img,txt}_mod.1``,
``.attn.{to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,norm_q,norm_k,
norm_added_q,norm_added_k}``, ``.{img,txt}_mlp.net.{0.proj,2}``, ``norm_out.linear``, ``proj_out``.

As ComfyUI's ``comfy/ldm/qwen_image/model.py`` computes it: the latent (B, 16, H, W), or
(B, 16, 1, H, W) as the Wan-style VAE gives it, is cut into 2x2 patches (64 numbers per token,
channel-major); the timestep is ComfyUI's flow timestep (sigma) embedded x 1000; the text
(Qwen2.5-VL's last hidden states) goes through an RMS norm and a projection. Every block keeps
an image and a text stream with their own modulation (shift, scale, gate for attention and MLP
from SiLU(t)), LayerNorms without weights, per-head RMS q/k norms and one joint attention over
[text, image]. Positions are rotary on three axes (16, 56, 56 channels): image patch (r, c) of an
h x w grid at (0, r - h // 2, c - w // 2), text token i at (s + i) on all three axes with
s = max(h // 2, w // 2). ComfyUI casts the rotation to the compute dtype and rotates there (as
here); diffusers' differ only on an odd patch grid (docs/families.md). The output is the flow
velocity ComfyUI's samplers take (``denoised = x - sigma * v``), no sign change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.flux_blocks import rope
from core.models.patches import (
    NO_PATCHES,
    AttentionRoute,
    NetworkPatches,
    PatchPoints,
    Site,
    attend_heads,
    attention_route,
)
from core.models.qwen_image.config import AXES_DIMS, ROPE_THETA, QwenImageConfig
from core.ops.layers import OpSet, default_ops

Device = torch.device | None
DType = torch.dtype | None

EPS = 1e-6


def rotate(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent channel pairs of ``x`` (B, L, H, D) by ``pe`` (1, L, 1, D/2, 2) as (cos,
    sin), in ``x``'s dtype (ComfyUI's rotation, its angles cast to the compute dtype)."""
    pe = pe.to(x.dtype)
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    cos, sin = pe[..., 0], pe[..., 1]
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack((cos * even - sin * odd, sin * even + cos * odd), dim=-1).reshape(x.shape)


class GeluProj(nn.Module):
    """``proj`` then GELU (tanh approximation)."""

    def __init__(self, dim: int, hidden: int, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.proj = ops.Linear(dim, hidden, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    """``net.0`` (GELU projection), ``net.1`` (dropout in training: nothing here), ``net.2``."""

    def __init__(self, cfg: QwenImageConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.net = nn.ModuleList(
            [
                GeluProj(cfg.dim, cfg.mlp_hidden, ops=ops, device=device, dtype=dtype),
                nn.Identity(),
                ops.Linear(cfg.mlp_hidden, cfg.dim, bias=True, device=device, dtype=dtype),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.net:
            x = layer(x)
        return x


class JointAttention(nn.Module):
    """Image and text projections of their own, per-head RMS q/k norms, one attention over
    [text, image] with rotary positions; each stream's output projected back by its own layer."""

    def __init__(self, cfg: QwenImageConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.heads, dim, d = cfg.n_heads, cfg.dim, cfg.head_dim

        def linear() -> nn.Linear:
            return ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)

        def norm() -> nn.RMSNorm:
            return ops.RMSNorm(d, eps=EPS, device=device, dtype=dtype)

        self.to_q, self.to_k, self.to_v = linear(), linear(), linear()
        self.add_q_proj, self.add_k_proj, self.add_v_proj = linear(), linear(), linear()
        self.norm_q, self.norm_k, self.norm_added_q, self.norm_added_k = norm(), norm(), norm(), norm()
        self.to_out = nn.ModuleList([ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)])
        self.to_add_out = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)

    def _heads(self, x: torch.Tensor, proj: str, norm: str) -> torch.Tensor:
        h = getattr(self, proj)(x)
        h = h.view(*h.shape[:-1], self.heads, -1)
        out: torch.Tensor = getattr(self, norm)(h)
        return out

    def forward(
        self, img: torch.Tensor, txt: torch.Tensor, pe: torch.Tensor, route: AttentionRoute | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``route``: the attention patches of this block's site (the joint attention over [text,
        picture] tokens, layer 0; q and k rotated)."""
        q = torch.cat([self._heads(txt, "add_q_proj", "norm_added_q"), self._heads(img, "to_q", "norm_q")], 1)
        k = torch.cat([self._heads(txt, "add_k_proj", "norm_added_k"), self._heads(img, "to_k", "norm_k")], 1)
        v = torch.cat([self.add_v_proj(txt), self.to_v(img)], 1)
        v = v.view(*v.shape[:-1], self.heads, -1)
        q, k = rotate(q, pe), rotate(k, pe)
        out = attend_heads(route, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0, "joint")
        n_txt = txt.shape[1]
        return self.to_out[0](out[:, n_txt:]), self.to_add_out(out[:, :n_txt])


def _modulate(x: torch.Tensor, mod: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """LayerNorm (no weights) of ``x``, shifted and scaled; and the gate. ``mod``: (B, 3 D)."""
    shift, scale, gate = mod[:, None].chunk(3, dim=-1)
    normed = F.layer_norm(x, (x.shape[-1],), eps=EPS)
    return torch.addcmul(shift, normed, 1 + scale), gate


def _modulate_split(
    x: torch.Tensor, mod: torch.Tensor, zero: tuple[torch.Tensor, int] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_modulate`, the tokens from ``zero[1]`` on (reference pictures) by ``zero[0]``'s
    modulation (the zero timestep's: Qwen-Image-Edit 2511's ``index_timestep_zero``)."""
    if zero is None:
        return _modulate(x, mod)
    mod0, at = zero
    a, gate_a = _modulate(x[:, :at], mod)
    b, gate_b = _modulate(x[:, at:], mod0)
    gate = torch.cat([gate_a.expand(-1, at, -1), gate_b.expand(-1, x.shape[1] - at, -1)], dim=1)
    return torch.cat([a, b], dim=1), gate


class DualStreamBlock(nn.Module):
    """One block: each stream modulated by the timestep (``img_mod`` / ``txt_mod``: SiLU, Linear to
    6 D), the joint attention, then each stream's own MLP."""

    def __init__(self, cfg: QwenImageConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        kw = {"ops": ops, "device": device, "dtype": dtype}

        def mod() -> nn.Sequential:
            linear = ops.Linear(cfg.dim, 6 * cfg.dim, bias=True, device=device, dtype=dtype)
            return nn.Sequential(nn.SiLU(), linear)

        self.img_mod, self.txt_mod = mod(), mod()
        self.attn = JointAttention(cfg, **kw)  # type: ignore[arg-type]
        self.img_mlp = FeedForward(cfg, **kw)  # type: ignore[arg-type]
        self.txt_mlp = FeedForward(cfg, **kw)  # type: ignore[arg-type]

    def forward(
        self,
        img: torch.Tensor,
        txt: torch.Tensor,
        temb: torch.Tensor,
        pe: torch.Tensor,
        route: AttentionRoute | None = None,
        zero: tuple[torch.Tensor, int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``route``: this block's attention patches. ``zero``: the zero timestep's embedding and the
        first reference token, where the reference pictures are modulated as at timestep 0 (Edit
        2511); None: all as ``temb``."""
        img1, img2 = self.img_mod(temb).chunk(2, dim=-1)
        txt1, txt2 = self.txt_mod(temb).chunk(2, dim=-1)
        zero1 = zero2 = None
        if zero is not None:
            z1, z2 = self.img_mod(zero[0]).chunk(2, dim=-1)
            zero1, zero2 = (z1, zero[1]), (z2, zero[1])
        img_in, img_gate = _modulate_split(img, img1, zero1)
        txt_in, txt_gate = _modulate(txt, txt1)
        img_attn, txt_attn = self.attn(img_in, txt_in, pe, route)
        del img_in, txt_in
        img = img + img_gate * img_attn
        txt = txt + txt_gate * txt_attn
        del img_attn, txt_attn
        img_in, img_gate = _modulate_split(img, img2, zero2)
        img = torch.addcmul(img, img_gate, self.img_mlp(img_in))
        del img_in
        txt_in, txt_gate = _modulate(txt, txt2)
        txt = torch.addcmul(txt, txt_gate, self.txt_mlp(txt_in))
        return img, txt


class TimestepEmbedder(nn.Module):
    """``linear_1`` (256 -> D), SiLU, ``linear_2`` (D -> D)."""

    def __init__(self, cfg: QwenImageConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(cfg.time_features, cfg.dim, bias=True, device=device, dtype=dtype)
        self.linear_2 = ops.Linear(cfg.dim, cfg.dim, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear_2(F.silu(self.linear_1(x)))
        return out


class TimeTextEmbed(nn.Module):
    def __init__(self, cfg: QwenImageConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.time_features = cfg.time_features
        self.timestep_embedder = TimestepEmbedder(cfg, ops=ops, device=device, dtype=dtype)

    def forward(self, sigma: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        feats = timestep_embedding(sigma, self.time_features, time_factor=1000.0)
        out: torch.Tensor = self.timestep_embedder(feats.to(dtype))
        return out


class OutputNorm(nn.Module):
    """``linear`` (SiLU(t) -> scale, shift), then the LayerNorm (no weights) scaled and shifted."""

    def __init__(self, cfg: QwenImageConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.linear = ops.Linear(cfg.dim, 2 * cfg.dim, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.linear(F.silu(temb))[:, None].chunk(2, dim=-1)
        return torch.addcmul(shift, F.layer_norm(x, (x.shape[-1],), eps=EPS), 1 + scale)


def _grid(index: int, h: int, w: int, device: torch.device) -> torch.Tensor:
    """(h w, 3) position ids of a picture's patches: (index, r - h // 2, c - w // 2)."""
    ids = torch.full((h, w, 3), float(index), dtype=torch.float32, device=device)
    ids[..., 1] = (torch.arange(h, dtype=torch.float32, device=device) - h // 2)[:, None]
    ids[..., 2] = (torch.arange(w, dtype=torch.float32, device=device) - w // 2)[None, :]
    return ids.reshape(h * w, 3)


def positions(
    h: int, w: int, txt_len: int, device: torch.device, references: Sequence[tuple[int, int]] = ()
) -> torch.Tensor:
    """(1, 1, txt_len + tokens, 64, 2) rotary angles: the text's tokens first, then the picture's,
    then each reference picture's patches (``references``: their patch grids) at index 1, 2, ...
    (ComfyUI's ``index`` method). The text starts past the picture's half size (not the
    references')."""
    start = max(h // 2, w // 2)
    txt = torch.arange(start, start + txt_len, dtype=torch.float32, device=device)[:, None].expand(-1, 3)
    grids = [_grid(0, h, w, device)] + [_grid(i + 1, rh, rw, device) for i, (rh, rw) in enumerate(references)]
    ids = torch.cat([txt, *grids], dim=0)
    return rope(ids[None], AXES_DIMS, ROPE_THETA)


def patchify(x: torch.Tensor, p: int) -> tuple[torch.Tensor, int, int]:
    """A latent (B, C, H, W) as (B, h w, C p p) tokens (padded circularly to whole patches) and
    its patch grid."""
    batch, channels, height, width = x.shape
    pad_h, pad_w = (-height) % p, (-width) % p
    if pad_h or pad_w:
        x = F.pad(x, (0, pad_w, 0, pad_h), mode="circular")
    h, w = (height + pad_h) // p, (width + pad_w) // p
    tokens = x.view(batch, channels, h, p, w, p).permute(0, 2, 4, 1, 3, 5).reshape(batch, h * w, -1)
    return tokens, h, w


class QwenImageDiT(nn.Module):
    """``forward(x, timesteps, context)``: a latent (B, C, H, W) or (B, C, 1, H, W), ComfyUI's flow
    timesteps (sigma, shape (B,)) and Qwen2.5-VL's hidden states (B, L, 3584) -> the flow
    velocity, shaped as ``x``."""

    def __init__(
        self,
        config: QwenImageConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = cfg = config
        dev = torch.device(device) if device is not None else None
        kw = {"ops": ops, "device": dev, "dtype": dtype}
        self.img_in = ops.Linear(cfg.in_channels, cfg.dim, bias=True, device=dev, dtype=dtype)
        self.txt_norm = ops.RMSNorm(cfg.context_dim, eps=EPS, device=dev, dtype=dtype)
        self.txt_in = ops.Linear(cfg.context_dim, cfg.dim, bias=True, device=dev, dtype=dtype)
        self.time_text_embed = TimeTextEmbed(cfg, **kw)  # type: ignore[arg-type]
        self.transformer_blocks = nn.ModuleList(DualStreamBlock(cfg, **kw) for _ in range(cfg.n_layers))  # type: ignore[arg-type]
        self.norm_out = OutputNorm(cfg, **kw)  # type: ignore[arg-type]
        out = cfg.patch_size**2 * cfg.out_channels
        self.proj_out = ops.Linear(cfg.dim, out, bias=True, device=dev, dtype=dtype)

    def patch_points(self) -> PatchPoints:
        """After each block (the picture's tokens), as ComfyUI's ``double_block`` patches; each
        block's joint attention over [text, picture (and reference)] tokens."""
        return PatchPoints({"double": len(self.transformer_blocks)}, attention=("joint",))

    def _check(self, x: torch.Tensor, context: torch.Tensor, patches: NetworkPatches) -> None:
        cfg = self.config
        if context.ndim != 3 or context.shape[-1] != cfg.context_dim:
            raise LoadoutError(
                f"Qwen-Image needs text features {cfg.context_dim} wide (batch, tokens, width)",
                why=f"got a context of shape {list(context.shape)}",
                fix="use the text encoder the model was made for (Qwen2.5-VL 7B)",
                code="bad_input",
            )
        if x.ndim == 5 and x.shape[2] != 1:
            raise LoadoutError(
                "Qwen-Image makes single pictures: its latent has one frame",
                why=f"got a latent of shape {list(x.shape)}",
                fix="generate one picture per latent",
                code="bad_input",
            )
        if patches.joins:
            raise ModelMismatchError(
                "this control feature cannot be applied to the Qwen-Image network",
                why="it patches skip connections, which this network does not have",
                fix="Leave that control feature out for this model",
                code="wrong_controlnet",
            )

    def forward(
        self,
        x: torch.Tensor,
        timesteps: torch.Tensor,
        context: torch.Tensor,
        patches: NetworkPatches = NO_PATCHES,
        references: Sequence[torch.Tensor] = (),
    ) -> torch.Tensor:
        """``patches``: block patches on the picture's tokens after each block, attention patches on
        each block's joint attention. ``references``:
        latents of reference pictures (Qwen-Image-Edit's, each (B, C, h, w) or one frame), attended
        as extra picture tokens (modulated as at timestep 0 where the config says so: Edit
        2511); the output is the picture's alone."""
        self._check(x, context, patches)
        frames = x.ndim == 5
        if frames:
            x = x[:, :, 0]
        p = self.config.patch_size
        batch, _, height, width = x.shape
        img, h, w = patchify(x, p)
        refs = [patchify(r[:, :, 0] if r.ndim == 5 else r, p) for r in references]
        n_img = img.shape[1]
        img = self.img_in(torch.cat([img, *(r[0].to(img.dtype) for r in refs)], dim=1))
        txt = self.txt_in(self.txt_norm(context.to(img.dtype)))
        temb = self.time_text_embed(timesteps.float(), img.dtype)
        zero = None
        if refs and self.config.zero_timestep_references:
            zero = (self.time_text_embed(torch.zeros_like(timesteps.float()), img.dtype), n_img)
        grids = [(rh, rw) for _, rh, rw in refs]
        pe = positions(h, w, txt.shape[1], x.device, grids).squeeze(1).unsqueeze(2)
        for i, block in enumerate(cast(Sequence[DualStreamBlock], self.transformer_blocks)):
            img, txt = block(img, txt, temb, pe, attention_route(patches, "double", i), zero)
            img = patches.block(img, Site("double", i))
        del txt
        out: torch.Tensor = self.proj_out(self.norm_out(img[:, :n_img], temb))
        c_out = self.config.out_channels
        out = out.view(batch, h, w, c_out, p, p).permute(0, 3, 1, 4, 2, 5).reshape(batch, c_out, h * p, w * p)
        out = out[:, :, :height, :width]
        return out[:, :, None] if frames else out
