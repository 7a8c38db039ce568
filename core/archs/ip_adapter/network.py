"""IP-Adapter's own weights (h94's files, ComfyUI_IPAdapter_plus's layout): the image projection
``image_proj.*`` that turns the vision tower's output into image tokens, and the extra key and
value projections ``ip_adapter.N.to_k_ip`` / ``to_v_ip`` of each cross-attention layer of the UNet
(``N`` odd: the attention processors' numbering, where even numbers are the self-attentions).

* base: ``image_proj.proj`` (the projected image embedding -> ``tokens`` x cross width) and
  ``image_proj.norm`` (LayerNorm);
* plus (and plus-face): the perceiver resampler, ``image_proj.latents`` (the learned queries),
  ``proj_in``, ``layers.N.0`` (attention of the queries over [picture tokens, queries], with
  ``norm1``/``norm2``, ``to_q``, ``to_kv``, ``to_out``), ``layers.N.1`` (LayerNorm, Linear, GELU,
  Linear; no biases), ``proj_out`` and ``norm_out``, over the tower's penultimate hidden states;
* full-face: an MLP over every one of the tower's penultimate hidden states (ComfyUI_IPAdapter_plus's
  ``MLPProjModel``, diffusers' ``IPAdapterFullImageProjection``): ``image_proj.proj.0`` (Linear,
  hidden -> hidden), GELU, ``proj.2`` (Linear, hidden -> cross width), ``proj.3`` (LayerNorm): one
  token per position (257 for ViT-H/14 at 224).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.archs.ip_adapter.face import FaceProjConfig, FaceProjection, face_config
from core.models.attention import attention
from core.ops.layers import OpSet, default_ops

_KV = re.compile(r"^ip_adapter\.(\d+)\.to_k_ip\.weight$")
_LAYER = re.compile(r"^image_proj\.layers\.(\d+)\.")


@dataclass(frozen=True)
class ResamplerConfig:
    dim: int
    depth: int
    heads: int
    queries: int
    embedding_dim: int
    output_dim: int
    ff_inner: int
    dim_head: int = 64


@dataclass(frozen=True)
class IpAdapterConfig:
    """``layers``: (number, inner width) of each cross-attention layer's projections, in order;
    ``cross_dim``: the width they take (the UNet's text context width)."""

    cross_dim: int
    layers: tuple[tuple[str, int], ...]
    embed_dim: int  # what the image projection takes (the tower's embedding or hidden width)
    tokens: int  # per picture (0: one per tower position, the full-face MLP)
    resampler: ResamplerConfig | None = None
    mlp: bool = False  # the full-face MLP projection
    face: FaceProjConfig | None = None


def config_from_shapes(shapes: Mapping[str, Sequence[int]]) -> IpAdapterConfig:
    """The config whose state dict has these shapes (KeyError/ValueError when it is not one)."""
    numbers = sorted(int(m.group(1)) for k in shapes if (m := _KV.match(k)))
    layers = tuple((str(n), int(shapes[f"ip_adapter.{n}.to_k_ip.weight"][0])) for n in numbers)
    cross = int(shapes[f"ip_adapter.{numbers[0]}.to_k_ip.weight"][1])
    if "image_proj.proj.3.weight" in shapes:
        return IpAdapterConfig(cross, layers, int(shapes["image_proj.proj.0.weight"][1]), 0, mlp=True)
    face = face_config(shapes)
    if face is not None:
        return IpAdapterConfig(cross, layers, face.id_dim, face.tokens, face=face)
    if "image_proj.latents" not in shapes:
        proj, norm = shapes["image_proj.proj.weight"], shapes["image_proj.norm.weight"]
        return IpAdapterConfig(cross, layers, int(proj[1]), int(proj[0]) // int(norm[0]))
    _, queries, dim = shapes["image_proj.latents"]
    depth = 1 + max(int(m.group(1)) for k in shapes if (m := _LAYER.match(k)))
    resampler = ResamplerConfig(
        dim=dim,
        depth=depth,
        heads=int(shapes["image_proj.layers.0.0.to_q.weight"][0]) // 64,
        queries=queries,
        embedding_dim=int(shapes["image_proj.proj_in.weight"][1]),
        output_dim=int(shapes["image_proj.proj_out.weight"][0]),
        ff_inner=int(shapes["image_proj.layers.0.1.1.weight"][0]),
    )
    return IpAdapterConfig(cross, layers, resampler.embedding_dim, queries, resampler)


class _Linear(nn.Module):
    """The base adapter's projection: ``proj`` then ``norm`` over ``tokens`` tokens."""

    def __init__(self, c: IpAdapterConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.tokens, self.width = c.tokens, c.cross_dim
        self.proj = ops.Linear(c.embed_dim, c.tokens * c.cross_dim, device=device, dtype=dtype)
        self.norm = ops.LayerNorm(c.cross_dim, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(self.proj(x).reshape(-1, self.tokens, self.width))
        return out


class _Mlp(nn.Module):
    """The full-face projection: ``proj`` = Linear, GELU, Linear, LayerNorm, per position."""

    def __init__(self, c: IpAdapterConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.proj = nn.Sequential(
            ops.Linear(c.embed_dim, c.embed_dim, device=device, dtype=dtype),
            _GELU(),
            ops.Linear(c.embed_dim, c.cross_dim, device=device, dtype=dtype),
            ops.LayerNorm(c.cross_dim, device=device, dtype=dtype),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.proj(x)
        return out


class _PerceiverAttention(nn.Module):
    def __init__(self, r: ResamplerConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        inner, self.heads = r.dim_head * r.heads, r.heads
        self.norm1 = ops.LayerNorm(r.dim, device=device, dtype=dtype)
        self.norm2 = ops.LayerNorm(r.dim, device=device, dtype=dtype)
        self.to_q = ops.Linear(r.dim, inner, bias=False, device=device, dtype=dtype)
        self.to_kv = ops.Linear(r.dim, inner * 2, bias=False, device=device, dtype=dtype)
        self.to_out = ops.Linear(inner, r.dim, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
        x, latents = self.norm1(x), self.norm2(latents)
        k, v = self.to_kv(torch.cat([x, latents], dim=1)).chunk(2, dim=-1)
        out: torch.Tensor = self.to_out(attention(self.to_q(latents), k, v, self.heads))
        return out


class _GELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def perceiver_layers(
    r: ResamplerConfig, ops: OpSet, device: Any, dtype: torch.dtype | None
) -> nn.ModuleList:
    """The resampler's ``depth`` pairs of (perceiver attention, feed-forward)."""

    def ff() -> nn.Sequential:
        return nn.Sequential(
            ops.LayerNorm(r.dim, device=device, dtype=dtype),
            ops.Linear(r.dim, r.ff_inner, bias=False, device=device, dtype=dtype),
            _GELU(),
            ops.Linear(r.ff_inner, r.dim, bias=False, device=device, dtype=dtype),
        )

    pairs = (nn.ModuleList([_PerceiverAttention(r, ops, device, dtype), ff()]) for _ in range(r.depth))
    return nn.ModuleList(pairs)


def _face_layers(c: FaceProjConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> nn.ModuleList:
    assert c.plus is not None
    depth, heads, clip, inner = c.plus
    r = ResamplerConfig(c.cross, depth, heads, c.tokens, clip, c.cross, inner)
    return perceiver_layers(r, ops, device, dtype)


class _Resampler(nn.Module):
    def __init__(self, r: ResamplerConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.latents = nn.Parameter(
            torch.empty(1, r.queries, r.dim, device=device, dtype=dtype), requires_grad=False
        )
        self.proj_in = ops.Linear(r.embedding_dim, r.dim, device=device, dtype=dtype)
        self.proj_out = ops.Linear(r.dim, r.output_dim, device=device, dtype=dtype)
        self.norm_out = ops.LayerNorm(r.output_dim, device=device, dtype=dtype)
        self.layers = perceiver_layers(r, ops, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        latents = self.latents.to(x).repeat(x.shape[0], 1, 1)
        x = self.proj_in(x)
        for pair in self.layers:
            attn, ff = pair[0], pair[1]  # type: ignore[index]
            latents = attn(x, latents) + latents
            latents = ff(latents) + latents
        out: torch.Tensor = self.norm_out(self.proj_out(latents))
        return out


class _KeyValue(nn.Module):
    def __init__(self, cross: int, inner: int, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.to_k_ip = ops.Linear(cross, inner, bias=False, device=device, dtype=dtype)
        self.to_v_ip = ops.Linear(cross, inner, bias=False, device=device, dtype=dtype)


class IpAdapterModel(nn.Module):
    """``project(embeds)`` -> image tokens [B, tokens, cross width]; ``key_value(i, tokens)`` the
    ``i``-th cross-attention layer's extra keys and values."""

    def __init__(
        self, config: IpAdapterConfig, *, ops: OpSet = default_ops, device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.config = config
        r, face = config.resampler, config.face
        self.image_proj: nn.Module
        if face is not None:
            layers = lambda: _face_layers(face, ops, device, dtype)  # noqa: E731
            self.image_proj = FaceProjection(face, layers, ops, device, dtype)
        elif config.mlp:
            self.image_proj = _Mlp(config, ops, device, dtype)
        elif r is None:
            self.image_proj = _Linear(config, ops, device, dtype)
        else:
            self.image_proj = _Resampler(r, ops, device, dtype)
        self.ip_adapter = nn.ModuleDict(
            {n: _KeyValue(config.cross_dim, inner, ops, device, dtype) for n, inner in config.layers}
        )
        self._order = tuple(n for n, _ in config.layers)

    def project(self, embeds: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.image_proj(embeds)
        return out

    def project_face_plus(
        self, face: torch.Tensor, clip: torch.Tensor, scale: float, shortcut: bool
    ) -> torch.Tensor:
        """FaceID Plus's tokens from the identity embedding and CLIP vision's penultimate states."""
        assert isinstance(self.image_proj, FaceProjection)
        return self.image_proj.plus(face, clip, scale, shortcut)

    def key_value(self, i: int, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self.ip_adapter[self._order[i]]
        assert isinstance(kv, _KeyValue)
        return kv.to_k_ip(tokens), kv.to_v_ip(tokens)
