"""The FLUX.2 transformer (klein 4B / 9B, dev) with state-dict keys in Black Forest Labs' layout
(the layout of Comfy-Org's ``flux-2-klein-4b.safetensors`` and ``flux2_dev_*.safetensors``):
``double_blocks.N.img_attn.qkv.weight``, ``single_blocks.N.linear1.weight``,
``double_stream_modulation_img.lin.weight``, ``img_in``, ``txt_in``, ``time_in``, ``guidance_in``
(dev only), ``final_layer``.

What differs from FLUX.1 (:mod:`core.models.flux`):

* one modulation for all double blocks of each stream and one for all single blocks
  (``double_stream_modulation_img/txt``, ``single_stream_modulation``), computed once per call;
* no biases anywhere; SwiGLU MLPs (``silu(first half) * second half`` of a doubled projection);
* no pooled vector (no ``vector_in``); the timestep (and dev's guidance) alone make ``vec``;
* tokens are the latent's own pixels (the VAE already packed 2x2 into 128 channels: patch 1);
* four rotary axes of 32 channels, theta 2000: image tokens at (index, row, column, 0), text
  tokens at (0, 0, 0, position) (ComfyUI's ``txt_ids_dims = [3]``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.flux_blocks import MLPEmbedder, Mod, Modulation, QKNorm, rope, rope_attention, split_qkv
from core.models.patches import (
    NO_PATCHES,
    AttentionRoute,
    NetworkPatches,
    PatchPoints,
    Site,
    attention_route,
)
from core.ops.layers import OpSet, default_ops

CHECKPOINT_PREFIX = "model.diffusion_model."
TIME_EMBEDDING_SIZE = 256
HEAD_DIM = 128

Device = torch.device | None
DType = torch.dtype | None


def _strip(shapes: Mapping[str, Sequence[int]]) -> Mapping[str, Sequence[int]]:
    if any(k.startswith(CHECKPOINT_PREFIX) for k in shapes):
        n = len(CHECKPOINT_PREFIX)
        return {k[n:]: v for k, v in shapes.items() if k.startswith(CHECKPOINT_PREFIX)}
    return shapes


def _count(shapes: Mapping[str, Sequence[int]], prefix: str) -> int:
    found = {int(m.group(1)) for k in shapes if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))}
    return max(found) + 1 if found else 0


@dataclass(frozen=True)
class Flux2Config:
    in_channels: int = 128
    out_channels: int = 128
    context_in_dim: int = 15360
    hidden_size: int = 6144
    mlp_ratio: float = 3.0
    num_heads: int = 48
    depth: int = 8
    depth_single_blocks: int = 48
    axes_dim: tuple[int, ...] = (32, 32, 32, 32)
    theta: int = 2000
    guidance_embed: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}"
            )
        if sum(self.axes_dim) != self.hidden_size // self.num_heads:
            raise ValueError(f"axes_dim {self.axes_dim} must add up to the head size")

    @property
    def mlp_hidden(self) -> int:
        return int(self.hidden_size * self.mlp_ratio)

    @classmethod
    def dev(cls) -> Flux2Config:
        return cls()

    @classmethod
    def klein_4b(cls) -> Flux2Config:
        return cls(context_in_dim=7680, hidden_size=3072, num_heads=24, depth=5, depth_single_blocks=20,
                   guidance_embed=False)  # fmt: skip

    @classmethod
    def klein_9b(cls) -> Flux2Config:
        return cls(context_in_dim=12288, hidden_size=4096, num_heads=32, depth=8, depth_single_blocks=24,
                   guidance_embed=False)  # fmt: skip

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> Flux2Config:
        """The config of a BFL-layout state dict from its tensor shapes alone."""
        shapes = _strip(shapes)
        needed = ("img_in.weight", "txt_in.weight", "double_stream_modulation_img.lin.weight",
                  "final_layer.linear.weight", "double_blocks.0.img_attn.norm.query_norm.scale")  # fmt: skip
        missing = [k for k in needed if k not in shapes]
        if missing:
            raise ModelMismatchError(
                "These tensors are not a FLUX.2 transformer in Black Forest Labs' layout",
                why=f"missing {missing}",
                fix="check that the file is a FLUX.2 diffusion model (diffusers files need conversion)",
            )
        hidden, in_channels = (int(d) for d in shapes["img_in.weight"])
        head_dim = int(shapes["double_blocks.0.img_attn.norm.query_norm.scale"][0])
        mlp = shapes.get("double_blocks.0.img_mlp.0.weight")
        axis = head_dim // 4
        return cls(
            in_channels=in_channels,
            out_channels=int(shapes["final_layer.linear.weight"][0]),
            context_in_dim=int(shapes["txt_in.weight"][1]),
            hidden_size=hidden,
            mlp_ratio=int(mlp[0]) / 2 / hidden if mlp is not None else 3.0,
            num_heads=hidden // head_dim,
            depth=_count(shapes, "double_blocks."),
            depth_single_blocks=_count(shapes, "single_blocks."),
            axes_dim=(head_dim - 3 * axis, axis, axis, axis),
            guidance_embed="guidance_in.in_layer.weight" in shapes,
        )


class SwiGLU(nn.Module):
    """``silu(a) * b`` of the two halves ``[a, b]`` of the last dimension (no weights)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


def swiglu_mlp(hidden: int, mlp_hidden: int, *, ops: OpSet, device: Device, dtype: DType) -> nn.Sequential:
    """``0``: hidden -> 2 x mlp, SwiGLU, ``2``: mlp -> hidden (the file's ``img_mlp.0`` / ``.2``)."""
    return nn.Sequential(
        ops.Linear(hidden, 2 * mlp_hidden, bias=False, device=device, dtype=dtype),
        SwiGLU(),
        ops.Linear(mlp_hidden, hidden, bias=False, device=device, dtype=dtype),
    )


class Attention(nn.Module):
    """``qkv`` (fused), per-head RMS ``norm`` of queries and keys, ``proj``; no biases."""

    def __init__(self, dim: int, heads: int, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = ops.Linear(dim, dim * 3, bias=False, device=device, dtype=dtype)
        self.norm = QKNorm(dim // heads, device=device, dtype=dtype)
        self.proj = ops.Linear(dim, dim, bias=False, device=device, dtype=dtype)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_qkv(self.qkv(x), self.heads, self.norm)


def _norm(hidden: int, ops: OpSet, device: Device, dtype: DType) -> nn.Module:
    return cast(
        nn.Module, ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, device=device, dtype=dtype)
    )


class DoubleBlock(nn.Module):
    """Image and text weights apart, one joint attention over [text, image]; modulated by the
    network's shared double-stream modulations (img attention, img MLP, txt attention, txt MLP)."""

    def __init__(self, c: Flux2Config, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        h, m = c.hidden_size, c.mlp_hidden
        self.img_norm1, self.img_norm2 = _norm(h, ops, device, dtype), _norm(h, ops, device, dtype)
        self.txt_norm1, self.txt_norm2 = _norm(h, ops, device, dtype), _norm(h, ops, device, dtype)
        self.img_attn = Attention(h, c.num_heads, ops=ops, device=device, dtype=dtype)
        self.img_mlp = swiglu_mlp(h, m, ops=ops, device=device, dtype=dtype)
        self.txt_attn = Attention(h, c.num_heads, ops=ops, device=device, dtype=dtype)
        self.txt_mlp = swiglu_mlp(h, m, ops=ops, device=device, dtype=dtype)

    def forward(
        self,
        img: torch.Tensor,
        txt: torch.Tensor,
        pe: torch.Tensor,
        mods: tuple[Mod, Mod, Mod, Mod],
        route: AttentionRoute | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``route``: the attention patches of this block's site (the joint attention, layer 0)."""
        img1, img2, txt1, txt2 = mods
        iq, ik, iv = self.img_attn.qkv_heads(img1.apply(self.img_norm1(img)))
        tq, tk, tv = self.txt_attn.qkv_heads(txt1.apply(self.txt_norm1(txt)))
        attn = rope_attention(
            torch.cat((tq, iq), dim=2),
            torch.cat((tk, ik), dim=2),
            torch.cat((tv, iv), dim=2),
            pe,
            None,
            route,
        )  # the joined q, k, v are temporaries: freed before the MLPs
        n_txt = txt.shape[1]
        img = img + img1.gate * self.img_attn.proj(attn[:, n_txt:])
        img = img + img2.gate * self.img_mlp(img2.apply(self.img_norm2(img)))
        txt = txt + txt1.gate * self.txt_attn.proj(attn[:, :n_txt])
        txt = txt + txt2.gate * self.txt_mlp(txt2.apply(self.txt_norm2(txt)))
        return img, txt


class SingleBlock(nn.Module):
    """``linear1`` = [q, k, v, 2 x mlp in], ``linear2`` = [attention, SwiGLU(mlp)] -> out; no biases."""

    def __init__(self, c: Flux2Config, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        h, m = c.hidden_size, c.mlp_hidden
        self.heads, self.hidden, self.mlp_hidden = c.num_heads, h, m
        self.linear1 = ops.Linear(h, 3 * h + 2 * m, bias=False, device=device, dtype=dtype)
        self.linear2 = ops.Linear(h + m, h, bias=False, device=device, dtype=dtype)
        self.norm = QKNorm(h // c.num_heads, device=device, dtype=dtype)
        self.pre_norm = _norm(h, ops, device, dtype)
        self.act = SwiGLU()

    def forward(
        self, x: torch.Tensor, pe: torch.Tensor, mod: Mod, route: AttentionRoute | None = None
    ) -> torch.Tensor:
        qkv, mlp = self.linear1(mod.apply(self.pre_norm(x))).split((3 * self.hidden, 2 * self.mlp_hidden), -1)
        q, k, v = split_qkv(qkv, self.heads, self.norm)
        attn = rope_attention(q, k, v, pe, None, route)
        out: torch.Tensor = self.linear2(torch.cat((attn, self.act(mlp)), dim=2))
        return x + mod.gate * out


class FinalLayer(nn.Module):
    def __init__(self, hidden: int, out_channels: int, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.norm_final = _norm(hidden, ops, device, dtype)
        self.linear = ops.Linear(hidden, out_channels, bias=False, device=device, dtype=dtype)
        self.adaLN_modulation = nn.Sequential(
            nn.SiLU(), ops.Linear(hidden, 2 * hidden, bias=False, device=device, dtype=dtype)
        )

    def forward(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(vec)[:, None, :].chunk(2, dim=-1)
        out: torch.Tensor = self.linear((1 + scale) * self.norm_final(x) + shift)
        return out


class Flux2(nn.Module):
    """``forward(img, img_ids, txt, txt_ids, timesteps, guidance)`` on tokens: img (B, L, 128) with
    ids (B, L, 4), the text encoder's stacked hidden states txt (B, Lt, context_in_dim) with ids,
    timesteps in 0..1 (sigma), the distilled guidance (B,) for dev. Returns (B, L, out_channels)."""

    def __init__(
        self,
        config: Flux2Config,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        dev = torch.device(device) if device is not None else None
        h = config.hidden_size
        self.img_in = ops.Linear(config.in_channels, h, bias=False, device=dev, dtype=dtype)
        self.txt_in = ops.Linear(config.context_in_dim, h, bias=False, device=dev, dtype=dtype)
        self.time_in = MLPEmbedder(TIME_EMBEDDING_SIZE, h, ops=ops, device=dev, dtype=dtype, bias=False)
        self.guidance_in: MLPEmbedder | None = None
        if config.guidance_embed:
            self.guidance_in = MLPEmbedder(
                TIME_EMBEDDING_SIZE, h, ops=ops, device=dev, dtype=dtype, bias=False
            )
        self.double_stream_modulation_img = Modulation(h, 2, ops=ops, device=dev, dtype=dtype, bias=False)
        self.double_stream_modulation_txt = Modulation(h, 2, ops=ops, device=dev, dtype=dtype, bias=False)
        self.single_stream_modulation = Modulation(h, 1, ops=ops, device=dev, dtype=dtype, bias=False)
        self.double_blocks = nn.ModuleList(
            DoubleBlock(config, ops=ops, device=dev, dtype=dtype) for _ in range(config.depth)
        )
        self.single_blocks = nn.ModuleList(
            SingleBlock(config, ops=ops, device=dev, dtype=dtype) for _ in range(config.depth_single_blocks)
        )
        self.final_layer = FinalLayer(h, config.out_channels, ops=ops, device=dev, dtype=dtype)

    def patch_points(self) -> PatchPoints:
        """After each double block (the picture's tokens) and each single block (text + picture);
        each block's joint attention (layer 0 of its site, q and k rotated)."""
        stages = {"double": len(self.double_blocks), "single": len(self.single_blocks)}
        return PatchPoints(stages, attention=("joint",))

    def forward(
        self,
        img: torch.Tensor,
        img_ids: torch.Tensor,
        txt: torch.Tensor,
        txt_ids: torch.Tensor,
        timesteps: torch.Tensor,
        guidance: torch.Tensor | None = None,
        patches: NetworkPatches = NO_PATCHES,
    ) -> torch.Tensor:
        dtype = img.dtype
        x = self.img_in(img)
        vec = self.time_in(timestep_embedding(timesteps, TIME_EMBEDDING_SIZE, time_factor=1000.0).to(dtype))
        if self.guidance_in is not None:
            if guidance is None:
                raise LoadoutError(
                    "This FLUX.2 model is guidance-distilled and needs a guidance value",
                    fix="pass guidance (4 is the usual value for FLUX.2 dev)",
                    code="bad_input",
                )
            vec = vec + self.guidance_in(
                timestep_embedding(guidance, TIME_EMBEDDING_SIZE, time_factor=1000.0).to(dtype)
            )
        ctx = self.txt_in(txt.to(dtype))
        pe = rope(torch.cat((txt_ids, img_ids), dim=1), self.config.axes_dim, self.config.theta)
        img1, img2 = self.double_stream_modulation_img(vec)
        txt1, txt2 = self.double_stream_modulation_txt(vec)
        (single,) = self.single_stream_modulation(vec)
        for i, block in enumerate(cast(Sequence[DoubleBlock], self.double_blocks)):
            x, ctx = block(x, ctx, pe, (img1, img2, txt1, txt2), attention_route(patches, "double", i))
            x = patches.block(x, Site("double", i))
        tokens = torch.cat((ctx, x), dim=1)
        for i, sblock in enumerate(cast(Sequence[SingleBlock], self.single_blocks)):
            tokens = sblock(tokens, pe, single, attention_route(patches, "single", i))
            tokens = patches.block(tokens, Site("single", i))
        out: torch.Tensor = self.final_layer(tokens[:, ctx.shape[1] :], vec)
        return out


def image_tokens(latent: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, H * W, C): each latent pixel one token (row-major)."""
    b, c, h, w = latent.shape
    return latent.reshape(b, c, h * w).transpose(1, 2)


def image_latent(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Inverse of :func:`image_tokens`."""
    b, length, c = tokens.shape
    if length != height * width:
        raise ValueError(f"{length} tokens do not make a {height}x{width} latent")
    return tokens.transpose(1, 2).reshape(b, c, height, width)


def image_ids(
    batch: int, height: int, width: int, *, index: float = 0.0, device: torch.device | str | None = None
) -> torch.Tensor:
    """Position ids (B, H * W, 4) = (index, row, column, 0) of each latent pixel; ``index`` tells
    reference pictures apart (ComfyUI: 10, 20, ... for the first, second ...)."""
    rows = torch.arange(height, device=device, dtype=torch.float32)[:, None].expand(height, width)
    cols = torch.arange(width, device=device, dtype=torch.float32)[None, :].expand(height, width)
    ids = torch.stack((torch.full_like(rows, index), rows, cols, torch.zeros_like(rows)), dim=-1)
    return ids.reshape(1, height * width, 4).expand(batch, -1, -1).clone()


def text_ids(batch: int, length: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Text tokens at (0, 0, 0, position) (ComfyUI's ``txt_ids_dims = [3]``)."""
    ids = torch.zeros(batch, length, 4, device=device, dtype=torch.float32)
    ids[..., 3] = torch.arange(length, device=device, dtype=torch.float32)
    return ids
