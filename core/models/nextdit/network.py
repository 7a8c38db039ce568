"""The Next-DiT transformer of Lumina 2 and Z-Image, keys in the original (ComfyUI) layout:
``x_embedder``, ``t_embedder.mlp.{0,2}``, ``cap_embedder.{0,1}`` (RMS norm, Linear),
``{noise_refiner,context_refiner,layers}.N.{attention.{qkv,out,q_norm,k_norm},
feed_forward.{w1,w2,w3}, attention_norm{1,2}, ffn_norm{1,2}, adaLN_modulation.{0|1}}``,
``final_layer.{linear, adaLN_modulation.1}`` and Z-Image's ``x_pad_token`` / ``cap_pad_token``.

As ComfyUI's ``comfy/ldm/lumina/model.py`` computes it: the network takes ComfyUI's flow timestep
(sigma) and embeds ``1 - sigma`` (x 1000 for Z-Image); caption tokens are projected (RMS norm,
Linear) and refined alone, image tokens (2x2 patches) are embedded and refined alone with the
timestep's modulation, then both run through the joint blocks as one sequence, caption first.
Positions are rotary on three axes: caption token i sits at (i + 1, 0, 0), image patch (r, c) at
(caption length + 1, r, c), Z-Image's pad tokens at (0, 0, 0) among the image tokens and at their
running index among the caption's (diffusers puts the caption's pads at (0, 0, 0) too: the one
place the two differ; they agree wherever the caption fills its multiple of 32). The network was
trained to predict image minus noise; ComfyUI negates it into the flow velocity its samplers take
(``denoised = x - sigma * v``), and so does this forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.flux_blocks import apply_rope, rope
from core.models.nextdit.config import NextDiTConfig, round_up
from core.models.patches import (
    NO_PATCHES,
    AttentionKind,
    AttentionRoute,
    NetworkPatches,
    PatchPoints,
    Site,
    StageInput,
    attend_heads,
    attention_route,
)
from core.ops.layers import OpSet, cast_to, default_ops

Device = torch.device | None
DType = torch.dtype | None

FREQUENCY_EMBEDDING_SIZE = 256
#: ComfyUI's q/k RMS norms have no eps of their own: float32's machine epsilon (diffusers: 1e-5)
QK_NORM_EPS = float(torch.finfo(torch.float32).eps)


class JointAttention(nn.Module):
    """Self-attention with a fused ``qkv`` (grouped kv heads), per-head RMS q/k norms (computed in
    float32) and 3-axis rotary positions."""

    def __init__(self, cfg: NextDiTConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        d = cfg.head_dim
        width = (cfg.n_heads + 2 * cfg.n_kv_heads) * d
        self.qkv = ops.Linear(cfg.dim, width, bias=False, device=device, dtype=dtype)
        self.out = ops.Linear(cfg.n_heads * d, cfg.dim, bias=False, device=device, dtype=dtype)
        self.q_norm = ops.RMSNorm(d, eps=QK_NORM_EPS, device=device, dtype=dtype)
        self.k_norm = ops.RMSNorm(d, eps=QK_NORM_EPS, device=device, dtype=dtype)

    def forward(
        self,
        x: torch.Tensor,
        pe: torch.Tensor,
        route: AttentionRoute | None = None,
        kind: AttentionKind = "joint",
    ) -> torch.Tensor:
        b, length, _ = x.shape
        d = self.head_dim
        q, k, v = self.qkv(x).split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        q = apply_rope(self.q_norm(q.view(b, length, self.heads, d).float()).transpose(1, 2), pe)
        k = apply_rope(self.k_norm(k.view(b, length, self.kv_heads, d).float()).transpose(1, 2), pe)
        v = v.view(b, length, self.kv_heads, d).transpose(1, 2)
        q, k = q.to(v.dtype), k.to(v.dtype)
        if self.heads != self.kv_heads:  # each kv head serves a run of query heads
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out: torch.Tensor = self.out(attend_heads(route, q, k, v, 0, kind))
        return out


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, cfg: NextDiTConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.w1 = ops.Linear(cfg.dim, cfg.ffn_hidden, bias=False, device=device, dtype=dtype)
        self.w2 = ops.Linear(cfg.ffn_hidden, cfg.dim, bias=False, device=device, dtype=dtype)
        self.w3 = ops.Linear(cfg.dim, cfg.ffn_hidden, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


def _modulation(cfg: NextDiTConfig, out: int, *, ops: OpSet, device: Device, dtype: DType) -> nn.Sequential:
    """Z-Image's blocks project the timestep vector as it is (``adaLN_modulation.0``); Lumina 2's
    (and both forms' final layer) through a SiLU first (``adaLN_modulation.1``)."""
    linear = ops.Linear(cfg.adaln_dim, out, bias=True, device=device, dtype=dtype)
    return nn.Sequential(linear) if cfg.z_image else nn.Sequential(nn.SiLU(), linear)


class JointBlock(nn.Module):
    """Attention and SwiGLU MLP, each between two RMS norms; with ``modulation``, the timestep
    scales each branch's input and gates its output (tanh)."""

    def __init__(
        self,
        cfg: NextDiTConfig,
        *,
        modulation: bool,
        ops: OpSet,
        device: Device,
        dtype: DType,
        kind: AttentionKind = "joint",
    ) -> None:
        super().__init__()
        self.kind = kind  # what its attention sees: caption or picture tokens alone ("self"), or both
        dim, eps = cfg.dim, cfg.norm_eps
        self.attention = JointAttention(cfg, ops=ops, device=device, dtype=dtype)
        self.feed_forward = FeedForward(cfg, ops=ops, device=device, dtype=dtype)
        self.attention_norm1 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.ffn_norm1 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.attention_norm2 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.ffn_norm2 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.adaLN_modulation: nn.Sequential | None = None
        if modulation:
            self.adaLN_modulation = _modulation(cfg, 4 * dim, ops=ops, device=device, dtype=dtype)

    def _attend(
        self, x: torch.Tensor, pe: torch.Tensor, scale: torch.Tensor | None, route: AttentionRoute | None
    ) -> torch.Tensor:
        """Its own function so that the branch's intermediates are freed before the MLP."""
        h = self.attention_norm1(x)
        if scale is not None:
            h = h * (1 + scale)
        out: torch.Tensor = self.attention_norm2(self.attention(h, pe, route, self.kind))
        return out

    def _mlp(self, x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        h = self.ffn_norm1(x)
        if scale is not None:
            h = h * (1 + scale)
        out: torch.Tensor = self.ffn_norm2(self.feed_forward(h))
        return out

    def forward(
        self,
        x: torch.Tensor,
        pe: torch.Tensor,
        t: torch.Tensor | None = None,
        route: AttentionRoute | None = None,
    ) -> torch.Tensor:
        """``route``: the attention patches of this block's site (its attention is layer 0)."""
        if self.adaLN_modulation is None:
            x = x + self._attend(x, pe, None, route)
            return x + self._mlp(x, None)
        assert t is not None
        mods: torch.Tensor = self.adaLN_modulation(t)[:, None]
        scale_msa, gate_msa, scale_mlp, gate_mlp = mods.chunk(4, dim=-1)
        x = x + gate_msa.tanh() * self._attend(x, pe, scale_msa, route)
        return x + gate_mlp.tanh() * self._mlp(x, scale_mlp)


class TimestepEmbedder(nn.Module):
    """``mlp.0`` (256 -> 1024), SiLU, ``mlp.2`` (1024 -> the modulation width: 1024, Z-Image 256)."""

    def __init__(self, cfg: NextDiTConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            ops.Linear(FREQUENCY_EMBEDDING_SIZE, cfg.t_hidden, bias=True, device=device, dtype=dtype),
            nn.SiLU(),
            ops.Linear(cfg.t_hidden, cfg.adaln_dim, bias=True, device=device, dtype=dtype),
        )

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        out: torch.Tensor = self.mlp(timestep_embedding(t, FREQUENCY_EMBEDDING_SIZE).to(dtype))
        return out


class FinalLayer(nn.Module):
    def __init__(self, cfg: NextDiTConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        out = cfg.patch_size**2 * cfg.in_channels
        self.linear = ops.Linear(cfg.dim, out, bias=True, device=device, dtype=dtype)
        linear = ops.Linear(cfg.adaln_dim, cfg.dim, bias=True, device=device, dtype=dtype)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), linear)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        scale = self.adaLN_modulation(t)[:, None]
        out: torch.Tensor = self.linear(F.layer_norm(x, (x.shape[-1],), eps=1e-6) * (1 + scale))
        return out


class NextDiT(nn.Module):
    """``forward(x, timesteps, context)``: a latent (B, C, H, W), ComfyUI's flow timesteps (sigma,
    shape (B,)) and the text encoder's hidden states (B, L, cap_feat_dim) -> the flow prediction
    (B, C, H, W)."""

    x_pad_token: torch.Tensor
    cap_pad_token: torch.Tensor

    def __init__(
        self,
        config: NextDiTConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        cfg, dev = config, torch.device(device) if device is not None else None
        patch_in = cfg.patch_size**2 * cfg.in_channels
        self.x_embedder = ops.Linear(patch_in, cfg.dim, bias=True, device=dev, dtype=dtype)
        self.t_embedder = TimestepEmbedder(cfg, ops=ops, device=dev, dtype=dtype)
        self.cap_embedder = nn.Sequential(
            ops.RMSNorm(cfg.cap_feat_dim, eps=cfg.norm_eps, device=dev, dtype=dtype),
            ops.Linear(cfg.cap_feat_dim, cfg.dim, bias=True, device=dev, dtype=dtype),
        )
        refiners = range(cfg.n_refiner_layers)

        def block(modulation: bool, kind: AttentionKind) -> JointBlock:
            return JointBlock(cfg, modulation=modulation, kind=kind, ops=ops, device=dev, dtype=dtype)

        self.noise_refiner = nn.ModuleList(block(True, "self") for _ in refiners)
        self.context_refiner = nn.ModuleList(block(False, "self") for _ in refiners)
        self.layers = nn.ModuleList(block(True, "joint") for _ in range(cfg.n_layers))
        self.final_layer = FinalLayer(cfg, ops=ops, device=dev, dtype=dtype)
        if cfg.pad_tokens_multiple is not None:
            self.x_pad_token = nn.Parameter(torch.empty(1, cfg.dim, device=dev, dtype=dtype))
            self.cap_pad_token = nn.Parameter(torch.empty(1, cfg.dim, device=dev, dtype=dtype))

    def _pad(self, tokens: torch.Tensor, pad_token: torch.Tensor) -> torch.Tensor:
        extra = round_up(tokens.shape[1], self.config.pad_tokens_multiple) - tokens.shape[1]
        if not extra:
            return tokens
        pad = cast_to(pad_token, tokens)
        assert pad is not None
        return torch.cat([tokens, pad[None].expand(tokens.shape[0], extra, -1)], dim=1)

    def positions(self, cap_len: int, h: int, w: int, img_len: int, device: torch.device) -> torch.Tensor:
        """(1, 1, cap_len + img_len, head_dim / 2, 2) rotary angles: the caption's tokens first
        (index i + 1), then the image's (index cap_len + 1, row, column), pad tokens at 0."""
        ids = torch.zeros(1, cap_len + img_len, 3, dtype=torch.float32, device=device)
        ids[0, :cap_len, 0] = torch.arange(1, cap_len + 1, dtype=torch.float32, device=device)
        rows = torch.arange(h, dtype=torch.float32, device=device)
        cols = torch.arange(w, dtype=torch.float32, device=device)
        grid = ids[0, cap_len : cap_len + h * w].view(h, w, 3)
        grid[..., 0] = cap_len + 1
        grid[..., 1] = rows[:, None]
        grid[..., 2] = cols[None, :]
        return rope(ids, self.config.axes_dims, self.config.rope_theta)

    def patch_points(self) -> PatchPoints:
        """After each joint block (caption and picture tokens, caption first); the attention of
        every block: the refiners' over the caption (``context_refiner``) or the picture
        (``noise_refiner``) alone (self-attention), the joint blocks' over both; stream patches
        after each noise refiner and each joint block."""
        cfg = self.config
        stages = {"joint": cfg.n_layers}
        attention: tuple[AttentionKind, ...] = ("self", "joint") if cfg.n_refiner_layers else ("joint",)
        streams = ("noise_refiner", "joint") if cfg.n_refiner_layers else ("joint",)
        return PatchPoints(stages, attention=attention, streams=streams)

    def forward(
        self,
        x: torch.Tensor,
        timesteps: torch.Tensor,
        context: torch.Tensor,
        patches: NetworkPatches = NO_PATCHES,
    ) -> torch.Tensor:
        """``patches``: block patches on the joint sequence after each joint block, attention
        patches on every block's attention (sites ``context_refiner``, ``noise_refiner``,
        ``joint``), stream patches after each noise refiner (the picture's tokens, the stage's
        input: the embedded picture) and each joint block (the joint sequence, the stage's input:
        the refined caption and picture)."""
        if patches.joins or patches.skip:
            raise ModelMismatchError(
                "this control feature cannot be applied to the Next-DiT network",
                why="it patches skip connections or leaves blocks out, which this network does not do",
                fix="Leave that control feature out for this model",
                code="wrong_controlnet",
            )
        cfg, p = self.config, self.config.patch_size
        if context.ndim != 3 or context.shape[-1] != cfg.cap_feat_dim:
            raise LoadoutError(
                f"this Next-DiT needs text features {cfg.cap_feat_dim} wide (batch, tokens, width)",
                why=f"got a context of shape {list(context.shape)}",
                fix="use the text encoder the model was made for (Z-Image: Qwen3-4B; Lumina 2: Gemma-2-2B)",
                code="bad_input",
            )
        batch, channels, height, width = x.shape
        pad_h, pad_w = (-height) % p, (-width) % p
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h), mode="circular")
        h, w = (height + pad_h) // p, (width + pad_w) // p
        t = self.t_embedder((1.0 - timesteps.float()) * cfg.time_scale, x.dtype)
        cap = self.cap_embedder(context.to(x.dtype))
        img = x.view(batch, channels, h, p, w, p).permute(0, 2, 4, 3, 5, 1).reshape(batch, h * w, -1)
        img = self.x_embedder(img)
        if cfg.pad_tokens_multiple is not None:
            cap, img = self._pad(cap, self.cap_pad_token), self._pad(img, self.x_pad_token)
        cap_len = cap.shape[1]
        pe = self.positions(cap_len, h, w, img.shape[1], x.device)
        pe_cap, pe_img = pe[:, :, :cap_len], pe[:, :, cap_len:]
        for i, block in enumerate(self.context_refiner):
            cap = block(cap, pe_cap, None, attention_route(patches, "context_refiner", i))
        first = img if patches.streams else x  # the stream patches' stage input, else nothing kept
        for i, block in enumerate(self.noise_refiner):
            img = block(img, pe_img, t, attention_route(patches, "noise_refiner", i))
            if patches.streams:
                img = patches.stream(img, Site("noise_refiner", i), StageInput(first, pe_img, t, (0, h * w)))
        joint = torch.cat([cap, img], dim=1)
        del cap, img
        first = joint if patches.streams else x  # the stream patches' stage input, else nothing kept
        for i, block in enumerate(self.layers):
            joint = block(joint, pe, t, attention_route(patches, "joint", i))
            joint = patches.block(joint, Site("joint", i))
            if patches.streams:
                joint = patches.stream(joint, Site("joint", i), StageInput(first, pe, t, (cap_len, h * w)))
        out: torch.Tensor = self.final_layer(joint, t)[:, cap_len : cap_len + h * w]
        out = out.reshape(batch, h, w, p, p, channels).permute(0, 5, 1, 3, 2, 4)
        return -out.reshape(batch, channels, h * p, w * p)[:, :, :height, :width]
