"""Qwen2.5-VL's vision tower (the ``visual.*`` part of a Qwen2.5-VL file), built from ``core.ops``
layers so the memory manager places, streams and casts it with the language model that holds it.

Keys as transformers and ComfyUI name them (Comfy-Org's ``qwen_2.5_vl_7b*.safetensors`` and the
original Hugging Face files carry ``visual.*``, transformers 4.50+ ``model.visual.*``):
``patch_embed.proj`` (a 3D convolution over 2 frames of 14 x 14 pixels, no bias),
``blocks.N.{norm1,norm2}`` (RMS), ``blocks.N.attn.{qkv,proj}``, ``blocks.N.mlp.{gate_proj,up_proj,
down_proj}`` (SiLU-gated, with biases), ``merger.ln_q`` (RMS) and ``merger.mlp.{0,2}`` (GELU between).

As ComfyUI's ``comfy/text_encoders/qwen_vl.py`` (and transformers'
``Qwen2_5_VisionTransformerPretrainedModel``) compute it: a still picture is two equal frames;
its 14 px patches are embedded in merge order (each 2 x 2 group of patches consecutive); the
tokens are regrouped window by window (windows of 112 px: 4 x 4 merged tokens), attention runs
inside each window except on the full-attention blocks (7, 15, 23, 31 in the released model),
which see the whole picture; positions are 2D rotary (row and column, each on a quarter of the
head); the merger norms each patch, joins each 2 x 2 group and projects it to the language model's
width; the output is put back in merge order, one token per 28 px.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.llm.norm import rms_norm
from core.ops.layers import OpSet, default_ops

EPS = 1e-6
#: ComfyUI's picture normalisation (CLIP's mean and std) and pixel bounds
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)
MIN_PIXELS, MAX_PIXELS = 3136, 12845056


@dataclass(frozen=True)
class VisionConfig:
    """Qwen2.5-VL-7B's vision tower by default; the widths and depth are read from a file."""

    hidden_size: int = 1280
    intermediate_size: int = 3420
    num_heads: int = 16
    depth: int = 32
    out_hidden_size: int = 3584
    patch_size: int = 14
    temporal_patch_size: int = 2
    merge_size: int = 2
    window_size: int = 112
    full_attention: tuple[int, ...] = (7, 15, 23, 31)
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 4:
            raise ModelMismatchError(
                f"a vision tower {self.hidden_size} wide cannot have {self.num_heads} heads",
                why="each head must split into four equal rotary quarters",
                fix="check that the file is a Qwen2.5-VL text encoder",
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_numbers(self) -> int:
        """Numbers per embedded patch: 3 channels x frames x patch x patch."""
        return 3 * self.temporal_patch_size * self.patch_size**2

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]], prefix: str = "visual.") -> VisionConfig | None:
        """The tower these shapes hold under ``prefix`` (None when they hold none)."""
        key = prefix + "patch_embed.proj.weight"
        if key not in shapes:
            return None
        hidden, _, frames, patch, _ = (int(d) for d in shapes[key])
        depth = 1 + max(
            (int(k[len(prefix) + 7 :].split(".", 1)[0]) for k in shapes if k.startswith(prefix + "blocks.")),
            default=-1,
        )
        base = cls()
        # the released model's 16 heads of 80; a narrower file keeps heads of 80
        heads = base.num_heads if hidden == base.hidden_size else max(1, hidden // base.head_dim)
        return replace(
            base,
            hidden_size=hidden,
            intermediate_size=int(shapes[prefix + "blocks.0.mlp.gate_proj.weight"][0]),
            num_heads=heads,
            depth=max(depth, 1),
            out_hidden_size=int(shapes[prefix + "merger.mlp.2.weight"][0]),
            patch_size=patch,
            temporal_patch_size=frames,
        )


# -- pictures -> patches -------------------------------------------------------------------------


def picture_size(height: int, width: int, cfg: VisionConfig) -> tuple[int, int]:
    """ComfyUI's size for a picture: each side rounded to whole 28 px tokens, then scaled (in
    whole tokens) into ``MIN_PIXELS``..``MAX_PIXELS``."""
    f = cfg.patch_size * cfg.merge_size
    h, w = round(height / f) * f, round(width / f) * f
    if h * w > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h, w = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
    elif h * w < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
    return h, w


def picture_patches(picture: torch.Tensor, cfg: VisionConfig) -> tuple[torch.Tensor, tuple[int, int, int]]:
    """One picture ``[3, H, W]`` (RGB in 0..1) -> its patches ``[N, 3 * 2 * 14 * 14]`` in merge order
    and its patch grid ``(1, rows, cols)``, as ComfyUI's ``process_qwen2vl_images``: resized
    bilinearly to :func:`picture_size`, normalised by CLIP's mean and std, the still picture taken
    as two equal frames."""
    if picture.ndim != 3 or picture.shape[0] != 3:
        raise LoadoutError(
            "the vision tower needs an RGB picture",
            why=f"got a tensor of shape {list(picture.shape)}",
            fix="pass the picture as [3, height, width]",
            code="bad_input",
        )
    h, w = picture_size(int(picture.shape[1]), int(picture.shape[2]), cfg)
    img = F.interpolate(picture[None].float(), size=(h, w), mode="bilinear", align_corners=False)[0]
    mean = torch.tensor(MEAN, dtype=img.dtype, device=img.device)[:, None, None]
    std = torch.tensor(STD, dtype=img.dtype, device=img.device)[:, None, None]
    img = (img - mean) / std
    p, m, t = cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size
    gh, gw = h // p, w // p
    frames = img[None].expand(t, -1, -1, -1)  # (t, 3, H, W)
    x = frames.reshape(t, 3, gh // m, m, p, gw // m, m, p)
    x = x.permute(2, 5, 3, 6, 1, 0, 4, 7)  # (gh/m, gw/m, m, m, 3, t, p, p)
    return x.reshape(gh * gw, 3 * t * p * p), (1, gh, gw)


# -- the network ---------------------------------------------------------------------------------


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class PatchEmbed(nn.Module):
    def __init__(self, cfg: VisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.cfg = cfg
        k = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.proj = ops.Conv3d(3, cfg.hidden_size, k, stride=k, bias=False, device=device, dtype=dtype)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        x = patches.view(-1, 3, c.temporal_patch_size, c.patch_size, c.patch_size)
        out: torch.Tensor = self.proj(x)
        return out.view(-1, c.hidden_size)


class VisionAttention(nn.Module):
    def __init__(self, cfg: VisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.heads = cfg.num_heads
        d = cfg.hidden_size
        self.qkv = ops.Linear(d, 3 * d, bias=True, device=device, dtype=dtype)
        self.proj = ops.Linear(d, d, bias=True, device=device, dtype=dtype)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, lengths: list[int]
    ) -> torch.Tensor:
        """``x`` (N, D) in window order; ``lengths``: the tokens of each attention span, in order."""
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, -1).permute(1, 2, 0, 3).unbind(0)  # (H, N, d)
        c, s = cos.to(torch.float32), sin.to(torch.float32)
        q = (q.float() * c + _rotate_half(q.float()) * s).to(x.dtype)
        k = (k.float() * c + _rotate_half(k.float()) * s).to(x.dtype)
        outs = [
            F.scaled_dot_product_attention(qs, ks, vs)
            for qs, ks, vs in zip(q.split(lengths, 1), k.split(lengths, 1), v.split(lengths, 1), strict=True)
        ]
        out: torch.Tensor = self.proj(torch.cat(outs, dim=1).transpose(0, 1).reshape(n, -1))
        return out


class VisionMlp(nn.Module):
    def __init__(self, cfg: VisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = ops.Linear(d, f, bias=True, device=device, dtype=dtype)
        self.up_proj = ops.Linear(d, f, bias=True, device=device, dtype=dtype)
        self.down_proj = ops.Linear(f, d, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class VisionBlock(nn.Module):
    def __init__(self, cfg: VisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.norm1 = ops.RMSNorm(cfg.hidden_size, eps=EPS, device=device, dtype=dtype)
        self.norm2 = ops.RMSNorm(cfg.hidden_size, eps=EPS, device=device, dtype=dtype)
        self.attn = VisionAttention(cfg, ops, device, dtype)
        self.mlp = VisionMlp(cfg, ops, device, dtype)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, lengths: list[int]
    ) -> torch.Tensor:
        x = x + self.attn(rms_norm(self.norm1, x, False), cos, sin, lengths)
        out: torch.Tensor = x + self.mlp(rms_norm(self.norm2, x, False))
        return out


class PatchMerger(nn.Module):
    def __init__(self, cfg: VisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.joined = cfg.hidden_size * cfg.merge_size**2
        self.ln_q = ops.RMSNorm(cfg.hidden_size, eps=EPS, device=device, dtype=dtype)
        self.mlp = nn.Sequential(
            ops.Linear(self.joined, self.joined, bias=True, device=device, dtype=dtype),
            nn.GELU(),
            ops.Linear(self.joined, cfg.out_hidden_size, bias=True, device=device, dtype=dtype),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.mlp(rms_norm(self.ln_q, x, False).reshape(-1, self.joined))
        return out


def window_order(grid: tuple[int, int, int], cfg: VisionConfig) -> tuple[torch.Tensor, list[int]]:
    """The merged tokens' order window by window (row-major windows of ``window_size`` px, each
    row-major inside) and each window's length in patches."""
    t, gh, gw = grid
    m = cfg.merge_size
    side = cfg.window_size // m // cfg.patch_size
    lh, lw = gh // m, gw // m
    index = torch.arange(t * lh * lw).reshape(t, lh, lw)
    order: list[torch.Tensor] = []
    lengths: list[int] = []
    for f in range(t):
        for r in range(0, lh, side):
            for c in range(0, lw, side):
                window = index[f, r : r + side, c : c + side].reshape(-1)
                order.append(window)
                lengths.append(int(window.numel()) * m * m)
    return torch.cat(order), lengths


def rotary(grid: tuple[int, int, int], cfg: VisionConfig, device: torch.device) -> torch.Tensor:
    """(N, head_dim / 2) angles of the patches in merge order: the row's on the first quarter of
    the head's frequencies, the column's on the second."""
    t, gh, gw = grid
    m = cfg.merge_size
    quarter = cfg.head_dim // 2
    inv = 1.0 / (
        cfg.rope_theta ** (torch.arange(0, quarter, 2, dtype=torch.float32, device=device) / quarter)
    )
    rows = torch.arange(gh, device=device)[:, None].expand(gh, gw)
    cols = torch.arange(gw, device=device)[None, :].expand(gh, gw)

    def merged(ids: torch.Tensor) -> torch.Tensor:
        return ids.reshape(gh // m, m, gw // m, m).permute(0, 2, 1, 3).reshape(-1)

    pos = torch.stack([merged(rows), merged(cols)], dim=-1).repeat(t, 1).float()  # (N, 2)
    return (pos[:, :, None] * inv[None, None, :]).reshape(pos.shape[0], -1)


class QwenVisionTower(nn.Module):
    """``forward(patches, grid)``: one picture's :func:`picture_patches` -> its tokens at the
    language model's width ``[rows / 2 * cols / 2, out_hidden_size]``, in reading order."""

    def __init__(
        self,
        config: VisionConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config, ops, device, dtype)
        self.blocks = nn.ModuleList(VisionBlock(config, ops, device, dtype) for _ in range(config.depth))
        self.merger = PatchMerger(config, ops, device, dtype)

    def forward(
        self, patches: torch.Tensor, grid: tuple[int, int, int], dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        cfg = self.config
        t, gh, gw = grid
        if gh % cfg.merge_size or gw % cfg.merge_size or patches.shape != (t * gh * gw, cfg.patch_numbers):
            raise LoadoutError(
                "the picture's patches do not match the vision tower",
                why=f"a {grid} grid of {cfg.patch_numbers}-number patches, got {list(patches.shape)}",
                fix="prepare the picture with picture_patches for this tower",
                code="bad_input",
            )
        weight = self.patch_embed.proj.weight
        dt = dtype or (
            weight.dtype if weight.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float32
        )
        unit = cfg.merge_size**2
        x = self.patch_embed(patches.to(dt))
        n = x.shape[0]
        order, window_lengths = window_order(grid, cfg)
        order = order.to(x.device)
        x = x.view(n // unit, unit, -1)[order].reshape(n, -1)
        angles = rotary(grid, cfg, x.device)
        angles = angles.view(n // unit, unit, -1)[order].reshape(n, -1)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos()[None], angles.sin()[None]
        whole = [gh * gw] * t
        for i, block in enumerate(cast(Sequence[VisionBlock], self.blocks)):
            x = block(x, cos, sin, whole if i in cfg.full_attention else window_lengths)
        merged: torch.Tensor = self.merger(x)
        return merged[torch.argsort(order)]
