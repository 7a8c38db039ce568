"""Depth Anything V2: a DINOv2 vision transformer whose four tapped layers feed a DPT head, built
from Loadout's op layers (cast at forward, placed and streamed by the memory manager).

The module names follow the original repository's (``pretrained.*``, ``depth_head.*``; what
comfyui_controlnet_aux loads), except that each block's fused ``attn.qkv`` is three layers
``attn.q``/``attn.k``/``attn.v``: the original file's rows are split into views and the
transformers layout's separate tensors go in as they are, so both fill the module zero-copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core import ops
from core.models.attention import attention
from core.ops.layers import cast_to

PATCH = 14
#: the blocks whose outputs feed the head, by depth (Depth-Anything-V2's intermediate_layer_idx)
TAPS = {12: (2, 5, 8, 11), 24: (4, 11, 17, 23), 40: (9, 19, 29, 39)}


@dataclass(frozen=True)
class DepthAnythingConfig:
    width: int  # the transformer's width (384 vits, 768 vitb, 1024 vitl)
    depth: int  # transformer blocks
    mlp: int  # the blocks' MLP width
    grid: int  # side of the trained position table (37 at 518 px)
    features: int  # the DPT head's width (64, 128, 256)
    out_channels: tuple[int, int, int, int]  # the four reassembled maps' channels
    #: how the position table is resized to another grid: "dinov2" (the original code's
    #: scale factor with its 0.1 offset, as comfyui_controlnet_aux runs it) or "transformers"
    #: (transformers' Dinov2 resizes to the grid's size)
    position_rule: str = "dinov2"

    @property
    def heads(self) -> int:
        return self.width // 64  # DINOv2's heads are 64 wide at every size

    @property
    def taps(self) -> tuple[int, ...]:
        """The tapped blocks: the original's table at 12/24/40 blocks, else the last block of each
        quarter (what a shortened network's config names)."""
        return TAPS.get(self.depth, tuple(round((i + 1) * self.depth / 4) - 1 for i in range(4)))


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.heads = heads
        self.q = ops.Linear(width, width, device=device)
        self.k = ops.Linear(width, width, device=device)
        self.v = ops.Linear(width, width, device=device)
        self.proj = ops.Linear(width, width, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(attention(self.q(x), self.k(x), self.v(x), self.heads))  # type: ignore[no-any-return]


class LayerScale(nn.Module):
    def __init__(self, width: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.empty(width, device=device), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        gamma = cast_to(self.gamma, x)
        assert gamma is not None
        return x * gamma


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.fc1 = ops.Linear(width, hidden, device=device)
        self.fc2 = ops.Linear(hidden, width, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))  # type: ignore[no-any-return]


class Block(nn.Module):
    def __init__(self, cfg: DepthAnythingConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.norm1 = ops.LayerNorm(cfg.width, eps=1e-6, device=device)
        self.attn = Attention(cfg.width, cfg.heads, device=device)
        self.ls1 = LayerScale(cfg.width, device=device)
        self.norm2 = ops.LayerNorm(cfg.width, eps=1e-6, device=device)
        self.mlp = Mlp(cfg.width, cfg.mlp, device=device)
        self.ls2 = LayerScale(cfg.width, device=device)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))  # type: ignore[no-any-return]


class PatchEmbed(nn.Module):
    def __init__(self, width: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.proj = ops.Conv2d(3, width, PATCH, stride=PATCH, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # type: ignore[no-any-return]


def resize_positions(table: Tensor, rows: int, cols: int, rule: str) -> Tensor:
    """The (1, 1 + g*g, C) position table for a ``rows`` x ``cols`` grid of patches, computed in
    float32 (see :attr:`DepthAnythingConfig.position_rule`); the table itself at its own square grid."""
    grid = math.isqrt(table.shape[1] - 1)
    if rows == cols == grid:
        return table
    first, rest = table[:, :1], table[:, 1:].float()
    rest = rest.reshape(1, grid, grid, -1).permute(0, 3, 1, 2)
    if rule == "dinov2":
        scale = ((rows + 0.1) / grid, (cols + 0.1) / grid)
        rest = F.interpolate(rest, scale_factor=scale, mode="bicubic", antialias=False)
    else:
        rest = F.interpolate(rest, size=(rows, cols), mode="bicubic", align_corners=False)
    assert rest.shape[-2:] == (rows, cols)
    rest = rest.permute(0, 2, 3, 1).reshape(1, rows * cols, -1).to(table.dtype)
    return torch.cat((first, rest), dim=1)


class Dinov2(nn.Module):
    def __init__(self, cfg: DepthAnythingConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.cls_token = nn.Parameter(torch.empty(1, 1, cfg.width, device=device), requires_grad=False)
        self.pos_embed = nn.Parameter(
            torch.empty(1, 1 + cfg.grid * cfg.grid, cfg.width, device=device), requires_grad=False
        )
        self.patch_embed = PatchEmbed(cfg.width, device=device)
        self.blocks = nn.ModuleList(Block(cfg, device=device) for _ in range(cfg.depth))
        self.norm = ops.LayerNorm(cfg.width, eps=1e-6, device=device)

    def tapped(self, x: Tensor) -> list[Tensor]:
        """The normalized patch tokens (B, rows*cols, C) after each tapped block."""
        rows, cols = x.shape[-2] // PATCH, x.shape[-1] // PATCH
        tokens = self.patch_embed(x)
        cls = cast_to(self.cls_token, tokens)
        table = cast_to(self.pos_embed, tokens)
        assert cls is not None and table is not None
        tokens = torch.cat((cls.expand(tokens.shape[0], -1, -1), tokens), dim=1)
        tokens = tokens + resize_positions(table, rows, cols, self.cfg.position_rule)
        out = []
        taps = set(self.cfg.taps)
        for i, block in enumerate(self.blocks):
            tokens = block(tokens)
            if i in taps:
                out.append(self.norm(tokens)[:, 1:])
        return out


class ResidualUnit(nn.Module):
    def __init__(self, features: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.conv1 = ops.Conv2d(features, features, 3, padding=1, device=device)
        self.conv2 = ops.Conv2d(features, features, 3, padding=1, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(F.relu(self.conv1(F.relu(x)))) + x  # type: ignore[no-any-return]


class Fusion(nn.Module):
    def __init__(self, features: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.out_conv = ops.Conv2d(features, features, 1, device=device)
        self.resConfUnit1 = ResidualUnit(features, device=device)
        self.resConfUnit2 = ResidualUnit(features, device=device)

    def forward(self, x: Tensor, skip: Tensor | None = None, size: tuple[int, int] | None = None) -> Tensor:
        if skip is not None:
            x = x + self.resConfUnit1(skip)
        x = self.resConfUnit2(x)
        if size is None:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        else:
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=True)
        return self.out_conv(x)  # type: ignore[no-any-return]


class Scratch(nn.Module):
    def __init__(self, cfg: DepthAnythingConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        f, c = cfg.features, cfg.out_channels
        self.layer1_rn = ops.Conv2d(c[0], f, 3, padding=1, bias=False, device=device)
        self.layer2_rn = ops.Conv2d(c[1], f, 3, padding=1, bias=False, device=device)
        self.layer3_rn = ops.Conv2d(c[2], f, 3, padding=1, bias=False, device=device)
        self.layer4_rn = ops.Conv2d(c[3], f, 3, padding=1, bias=False, device=device)
        self.refinenet1 = Fusion(f, device=device)
        self.refinenet2 = Fusion(f, device=device)
        self.refinenet3 = Fusion(f, device=device)
        self.refinenet4 = Fusion(f, device=device)
        self.output_conv1 = ops.Conv2d(f, f // 2, 3, padding=1, device=device)
        self.output_conv2 = nn.Sequential(
            ops.Conv2d(f // 2, 32, 3, padding=1, device=device), nn.ReLU(),
            ops.Conv2d(32, 1, 1, device=device), nn.ReLU(),
        )  # fmt: skip


def _resize_layer(c: int, i: int, device: torch.device | str | None) -> nn.Module:
    if i == 0:
        return ops.ConvTranspose2d(c, c, 4, stride=4, device=device)
    if i == 1:
        return ops.ConvTranspose2d(c, c, 2, stride=2, device=device)
    if i == 2:
        return nn.Identity()
    return ops.Conv2d(c, c, 3, stride=2, padding=1, device=device)


class DptHead(nn.Module):
    def __init__(self, cfg: DepthAnythingConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.projects = nn.ModuleList(ops.Conv2d(cfg.width, c, 1, device=device) for c in cfg.out_channels)
        self.resize_layers = nn.ModuleList(
            _resize_layer(c, i, device) for i, c in enumerate(cfg.out_channels)
        )
        self.scratch = Scratch(cfg, device=device)

    def forward(self, tokens: list[Tensor], rows: int, cols: int) -> Tensor:
        maps = []
        for i, t in enumerate(tokens):
            x = t.permute(0, 2, 1).reshape(t.shape[0], t.shape[-1], rows, cols)
            maps.append(self.resize_layers[i](self.projects[i](x)))
        s = self.scratch
        rn1, rn2, rn3, rn4 = (
            s.layer1_rn(maps[0]),
            s.layer2_rn(maps[1]),
            s.layer3_rn(maps[2]),
            s.layer4_rn(maps[3]),
        )
        path = s.refinenet4(rn4, size=(rn3.shape[2], rn3.shape[3]))
        path = s.refinenet3(path, rn3, size=(rn2.shape[2], rn2.shape[3]))
        path = s.refinenet2(path, rn2, size=(rn1.shape[2], rn1.shape[3]))
        path = s.refinenet1(path, rn1)
        out = s.output_conv1(path)
        out = F.interpolate(out, (rows * PATCH, cols * PATCH), mode="bilinear", align_corners=True)
        return s.output_conv2(out)  # type: ignore[no-any-return]


class DepthAnythingV2(nn.Module):
    """Pictures (B, 3, H, W), normalized, H and W multiples of 14 -> relative depth (B, H, W)
    (larger is nearer; ReLU'd, ``max_depth`` 1 as comfyui_controlnet_aux's relative model)."""

    def __init__(self, cfg: DepthAnythingConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.pretrained = Dinov2(cfg, device=device)
        self.depth_head = DptHead(cfg, device=device)

    def forward(self, x: Tensor) -> Tensor:
        rows, cols = x.shape[-2] // PATCH, x.shape[-1] // PATCH
        return self.depth_head(self.pretrained.tapped(x), rows, cols).squeeze(1)  # type: ignore[no-any-return]
