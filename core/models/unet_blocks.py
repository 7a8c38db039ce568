"""Building blocks of the Stable Diffusion UNet, named as in the original LDM/SGM code.

Attribute names and ``nn.Sequential`` positions are the checkpoint's key layout: a ResBlock's
``in_layers.2`` is its first convolution, ``out_layers.3`` its second (``out_layers.2`` is the
parameter-free dropout slot), a transformer's ``attn1.to_out.0`` its output projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from core.models.attention import attention
from core.models.patches import AttentionRoute
from core.models.unet_config import GROUPS
from core.ops.layers import OpSet


@dataclass(frozen=True)
class LayerFactory:
    """Makes layers from one :class:`OpSet` on one device and dtype."""

    ops: OpSet
    device: torch.device | str | None = None
    dtype: torch.dtype | None = None

    def linear(self, in_features: int, out_features: int, *, bias: bool = True) -> nn.Linear:
        return self.ops.Linear(in_features, out_features, bias=bias, device=self.device, dtype=self.dtype)

    def conv(self, in_ch: int, out_ch: int, kernel: int, *, stride: int = 1, padding: int = 0) -> nn.Conv2d:
        return self.ops.Conv2d(
            in_ch, out_ch, kernel, stride=stride, padding=padding, device=self.device, dtype=self.dtype
        )

    def group_norm(self, channels: int, *, eps: float = 1e-5) -> nn.GroupNorm:
        return self.ops.GroupNorm(
            GROUPS, channels, eps=eps, affine=True, device=self.device, dtype=self.dtype
        )

    def layer_norm(self, dim: int) -> nn.LayerNorm:
        return self.ops.LayerNorm(dim, device=self.device, dtype=self.dtype)


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv, plus the timestep embedding, GroupNorm-SiLU-conv, plus the skip."""

    def __init__(self, f: LayerFactory, in_ch: int, out_ch: int, emb_dim: int) -> None:
        super().__init__()
        self.in_layers = nn.Sequential(f.group_norm(in_ch), nn.SiLU(), f.conv(in_ch, out_ch, 3, padding=1))
        self.emb_layers = nn.Sequential(nn.SiLU(), f.linear(emb_dim, out_ch))
        self.out_layers = nn.Sequential(
            f.group_norm(out_ch), nn.SiLU(), nn.Identity(), f.conv(out_ch, out_ch, 3, padding=1)
        )
        self.skip_connection: nn.Module = nn.Identity() if in_ch == out_ch else f.conv(in_ch, out_ch, 1)

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.in_layers(x)
        e: torch.Tensor = self.emb_layers(emb)
        h = self.out_layers(h + e[:, :, None, None])
        skip: torch.Tensor = self.skip_connection(x)
        return skip + h


class Downsample(nn.Module):
    def __init__(self, f: LayerFactory, channels: int) -> None:
        super().__init__()
        self.op = f.conv(channels, channels, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.op(x)
        return out


class Upsample(nn.Module):
    """Nearest x2 (or to ``size``: the next skip's size, for odd latent sizes), then a 3x3 conv."""

    def __init__(self, f: LayerFactory, channels: int) -> None:
        super().__init__()
        self.conv = f.conv(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, size: tuple[int, int] | None = None) -> torch.Tensor:
        if size is None:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        else:
            x = F.interpolate(x, size=size, mode="nearest")
        out: torch.Tensor = self.conv(x)
        return out


class CrossAttention(nn.Module):
    """Multi-head attention; self-attention when ``context_dim`` is None."""

    def __init__(self, f: LayerFactory, dim: int, heads: int, head_dim: int, context_dim: int | None) -> None:
        super().__init__()
        inner = heads * head_dim
        kv_dim = dim if context_dim is None else context_dim
        self.heads = heads
        self.to_q = f.linear(dim, inner, bias=False)
        self.to_k = f.linear(kv_dim, inner, bias=False)
        self.to_v = f.linear(kv_dim, inner, bias=False)
        self.to_out = nn.Sequential(f.linear(inner, dim), nn.Identity())

    def forward(
        self, x: torch.Tensor, context: torch.Tensor | None = None, route: AttentionRoute | None = None,
        layer: int = 0,
    ) -> torch.Tensor:  # fmt: skip
        """``route``: the forward's attention patches and this block's site (None: no patches)."""
        kv = x if context is None else context
        q, k, v = self.to_q(x), self.to_k(kv), self.to_v(kv)
        if route is None:
            h = attention(q, k, v, self.heads)
        else:
            h = route.attend(q, k, v, self.heads, layer, "self" if context is None else "cross")
        out: torch.Tensor = self.to_out(h)
        return out


class GEGLU(nn.Module):
    def __init__(self, f: LayerFactory, dim: int, inner: int) -> None:
        super().__init__()
        self.proj = f.linear(dim, inner * 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, gate = self.proj(x).chunk(2, dim=-1)
        out: torch.Tensor = h * F.gelu(gate)
        return out


class FeedForward(nn.Module):
    def __init__(self, f: LayerFactory, dim: int, mult: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(GEGLU(f, dim, dim * mult), nn.Identity(), f.linear(dim * mult, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


class BasicTransformerBlock(nn.Module):
    def __init__(self, f: LayerFactory, dim: int, heads: int, head_dim: int, context_dim: int) -> None:
        super().__init__()
        self.attn1 = CrossAttention(f, dim, heads, head_dim, None)
        self.ff = FeedForward(f, dim)
        self.attn2 = CrossAttention(f, dim, heads, head_dim, context_dim)
        self.norm1 = f.layer_norm(dim)
        self.norm2 = f.layer_norm(dim)
        self.norm3 = f.layer_norm(dim)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor, route: AttentionRoute | None = None, layer: int = 0
    ) -> torch.Tensor:
        x = x + self.attn1(self.norm1(x), None, route, layer)
        x = x + self.attn2(self.norm2(x), context, route, layer)
        out: torch.Tensor = x + self.ff(self.norm3(x))
        return out


class SpatialTransformer(nn.Module):
    """GroupNorm, proj_in, ``depth`` transformer blocks on the flattened pixels, proj_out, residual."""

    def __init__(
        self,
        f: LayerFactory,
        channels: int,
        heads: int,
        head_dim: int,
        depth: int,
        context_dim: int,
        linear: bool,
    ) -> None:
        super().__init__()
        inner = heads * head_dim
        self.linear = linear
        self.norm = f.group_norm(channels, eps=1e-6)
        self.proj_in: nn.Module = f.linear(channels, inner) if linear else f.conv(channels, inner, 1)
        self.transformer_blocks = nn.ModuleList(
            BasicTransformerBlock(f, inner, heads, head_dim, context_dim) for _ in range(depth)
        )
        self.proj_out: nn.Module = f.linear(inner, channels) if linear else f.conv(inner, channels, 1)

    def forward(
        self, x: torch.Tensor, context: torch.Tensor, route: AttentionRoute | None = None
    ) -> torch.Tensor:
        b, _, height, width = x.shape
        h: torch.Tensor = self.norm(x)
        if not self.linear:
            h = self.proj_in(h)
        h = h.flatten(2).transpose(1, 2)
        if self.linear:
            h = self.proj_in(h)
        for layer, block in enumerate(self.transformer_blocks):
            h = block(h, context, route, layer)
        if self.linear:
            h = self.proj_out(h)
        h = h.transpose(1, 2).reshape(b, -1, height, width)
        if not self.linear:
            h = self.proj_out(h)
        return x + h


class UNetBlock(nn.Sequential):
    """One ``input_blocks.N`` / ``middle_block`` / ``output_blocks.N``: passes each layer what it needs."""

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        emb: torch.Tensor,
        context: torch.Tensor | None,
        size: tuple[int, int] | None = None,
        route: AttentionRoute | None = None,
    ) -> torch.Tensor:
        for layer in self:
            if isinstance(layer, ResBlock):
                x = layer(x, emb)
            elif isinstance(layer, SpatialTransformer):
                if context is None:
                    raise ValueError("this UNet has cross-attention: forward() needs a context tensor")
                x = layer(x, context, route)
            elif isinstance(layer, Upsample):
                x = layer(x, size)
            else:
                x = layer(x)
        return x
