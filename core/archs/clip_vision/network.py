"""CLIP's vision tower (ViT-H/14, ViT-bigG/14, ViT-L/14) from op layers, in the transformers
``CLIPVisionModelWithProjection`` layout: ``vision_model.embeddings.{class_embedding,
patch_embedding.weight, position_embedding.weight}``, ``vision_model.pre_layrnorm``,
``vision_model.encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2, mlp.fc1,
mlp.fc2}``, ``vision_model.post_layernorm``, ``visual_projection.weight`` (no bias).

One forward gives what image prompts read (ComfyUI's ``CLIPVisionEncode`` outputs): the last
hidden state (before the final norm), the penultimate layer's output (transformers'
``hidden_states[-2]``: an IP-Adapter plus reads it) and ``image_embeds``, the post-normed class
token through the projection (a base IP-Adapter reads it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.models.encoder_layer import EncoderLayer
from core.ops.layers import OpSet, default_ops

PREFIX = "vision_model."


@dataclass(frozen=True)
class CLIPVisionConfig:
    hidden_size: int = 1280
    intermediate_size: int = 5120
    num_layers: int = 32
    num_heads: int = 16
    patch_size: int = 14
    image_size: int = 224
    projection_dim: int = 1024
    quick_gelu: bool = False
    layer_norm_eps: float = 1e-5

    @property
    def positions(self) -> int:
        return (self.image_size // self.patch_size) ** 2 + 1


#: width -> (heads, quick_gelu): what shapes cannot show (ViT-L/14 is OpenAI's, with quick GELU)
KNOWN_WIDTHS: Mapping[int, tuple[int, bool]] = {1024: (16, True), 1280: (16, False), 1664: (16, False)}


def config_from_shapes(shapes: Mapping[str, Sequence[int]]) -> CLIPVisionConfig:
    """The config whose (transformers-layout) state dict has these shapes; KeyError/ValueError
    when a key the config is read from is missing."""
    width, _, patch, _ = shapes[PREFIX + "embeddings.patch_embedding.weight"]
    positions = shapes[PREFIX + "embeddings.position_embedding.weight"][0]
    inner = shapes[PREFIX + "encoder.layers.0.mlp.fc1.weight"][0]
    projection = shapes["visual_projection.weight"][0]
    marker = PREFIX + "encoder.layers."
    layers = 1 + max(int(k[len(marker) :].split(".", 1)[0]) for k in shapes if k.startswith(marker))
    side = round((positions - 1) ** 0.5)
    if side * side + 1 != positions:
        raise ValueError(f"{positions} positions are not a square grid of patches and a class token")
    heads, quick = KNOWN_WIDTHS.get(width, (max(1, width // 64), False))
    return CLIPVisionConfig(width, inner, layers, heads, patch, side * patch, projection, quick)


@dataclass(frozen=True)
class VisionOutput:
    """``last_hidden_state`` and ``penultimate`` [B, 1 + patches, width]; ``image_embeds`` [B, proj]."""

    last_hidden_state: torch.Tensor
    penultimate: torch.Tensor
    image_embeds: torch.Tensor


class _Embeddings(nn.Module):
    def __init__(self, c: CLIPVisionConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        w = c.hidden_size
        self.class_embedding = nn.Parameter(torch.empty(w, device=device, dtype=dtype), requires_grad=False)
        self.patch_embedding = ops.Conv2d(
            3, w, c.patch_size, stride=c.patch_size, bias=False, device=device, dtype=dtype
        )
        self.position_embedding = ops.Embedding(c.positions, w, device=device, dtype=dtype)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        patches: torch.Tensor = self.patch_embedding(pixels).flatten(2).transpose(1, 2)
        cls = self.class_embedding.to(patches).expand(patches.shape[0], 1, -1)
        x = torch.cat([cls, patches], dim=1)
        ids = torch.arange(x.shape[1], device=x.device)
        pos: torch.Tensor = self.position_embedding(ids, out_dtype=x.dtype)
        return x + pos


class _Encoder(nn.Module):
    def __init__(self, c: CLIPVisionConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        act, eps = ("quick_gelu" if c.quick_gelu else "gelu"), c.layer_norm_eps
        self.layers = nn.ModuleList(
            EncoderLayer(c.hidden_size, c.num_heads, c.intermediate_size, act, eps, ops, device, dtype)
            for _ in range(c.num_layers)
        )


class _Tower(nn.Module):
    def __init__(self, c: CLIPVisionConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        w, eps = c.hidden_size, c.layer_norm_eps
        self.embeddings = _Embeddings(c, ops, device, dtype)
        self.pre_layrnorm = ops.LayerNorm(w, eps=eps, device=device, dtype=dtype)  # transformers' spelling
        self.encoder = _Encoder(c, ops, device, dtype)
        self.post_layernorm = ops.LayerNorm(w, eps=eps, device=device, dtype=dtype)


class CLIPVisionModel(nn.Module):
    """``forward(pixels)``: normalised pixels [B, 3, S, S] -> :class:`VisionOutput`."""

    def __init__(
        self, config: CLIPVisionConfig, *, ops: OpSet = default_ops, device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.config = config
        self.vision_model = _Tower(config, ops, device, dtype)
        self.visual_projection = ops.Linear(
            config.hidden_size, config.projection_dim, bias=False, device=device, dtype=dtype
        )

    def forward(self, pixels: torch.Tensor) -> VisionOutput:
        tower = self.vision_model
        x = tower.pre_layrnorm(tower.embeddings(pixels))
        layers: nn.ModuleList = tower.encoder.layers
        penultimate = x  # one layer: its input is transformers' hidden_states[-2]
        for i, layer in enumerate(layers):
            x = layer(x)
            if i == len(layers) - 2:
                penultimate = x
        pooled = tower.post_layernorm(x[:, 0, :])
        return VisionOutput(x, penultimate, self.visual_projection(pooled))
