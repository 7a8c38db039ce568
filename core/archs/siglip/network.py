"""SigLIP's vision tower (so400m, patch 14, 384: FLUX Redux's image encoder) from ``core.ops``
layers, in the transformers ``SiglipVisionModel`` layout (``vision_model.embeddings``,
``vision_model.encoder.layers.N``, ``vision_model.post_layernorm``), which is also ComfyUI's
(``clip_vision/sigclip_vision_patch14_384.safetensors``).

The forward is ComfyUI's ``CLIPVision`` for a ``siglip_vision_model``: a biased patch convolution
plus learned positions (no class token, no pre-norm), pre-norm transformer layers (tanh GELU MLP),
then the post layer norm over every token. That normed sequence is what ComfyUI calls the
``last_hidden_state`` (transformers' ``last_hidden_state`` is the same). The attention-pooling
head (``vision_model.head``) is not built: ComfyUI loads the file with ``strict=False`` and never
uses it, and neither does Redux. Layer norms use ComfyUI's eps (1e-5, torch's default; the
transformers config says 1e-6: docs/families.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.models.encoder_layer import EncoderLayer
from core.ops.layers import OpSet, default_ops

_LAYER = re.compile(r"vision_model\.encoder\.layers\.(\d+)\.")
PREFIX = "vision_model."


@dataclass(frozen=True)
class SiglipVisionConfig:
    """One SigLIP vision tower's shape (so400m-patch14-384 by default)."""

    width: int = 1152
    layers: int = 27
    heads: int = 16
    mlp: int = 4304
    patch: int = 14
    image_size: int = 384
    layer_norm_eps: float = 1e-5

    @property
    def positions(self) -> int:
        return (self.image_size // self.patch) ** 2

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]], heads: int = 16) -> SiglipVisionConfig:
        """The config whose module has these shapes (heads are not in the shapes: so400m's 16)."""
        width, _, patch, _ = shapes[f"{PREFIX}embeddings.patch_embedding.weight"]
        positions = shapes[f"{PREFIX}embeddings.position_embedding.weight"][0]
        side = round(positions**0.5)
        layers = 1 + max((int(m.group(1)) for k in shapes if (m := _LAYER.match(k))), default=-1)
        mlp = shapes[f"{PREFIX}encoder.layers.0.mlp.fc1.weight"][0]
        return cls(width=width, layers=layers, heads=heads, mlp=mlp, patch=patch, image_size=side * patch)


class _Embeddings(nn.Module):
    def __init__(self, c: SiglipVisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.patch_embedding = ops.Conv2d(
            3, c.width, kernel_size=c.patch, stride=c.patch, device=device, dtype=dtype
        )
        self.position_embedding = ops.Embedding(c.positions, c.width, device=device, dtype=dtype)


class _Encoder(nn.Module):
    def __init__(self, c: SiglipVisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        act, eps = "gelu_pytorch_tanh", c.layer_norm_eps
        self.layers = nn.ModuleList(
            EncoderLayer(c.width, c.heads, c.mlp, act, eps, ops, device, dtype) for _ in range(c.layers)
        )


class _Tower(nn.Module):
    def __init__(self, c: SiglipVisionConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.embeddings = _Embeddings(c, ops, device, dtype)
        self.encoder = _Encoder(c, ops, device, dtype)
        eps = c.layer_norm_eps
        self.post_layernorm = ops.LayerNorm(c.width, eps=eps, device=device, dtype=dtype)


class SiglipVision(nn.Module):
    """SigLIP's vision tower: ``[B, 3, S, S]`` normalised pixels -> ``[B, (S/patch)^2, width]``."""

    def __init__(
        self,
        config: SiglipVisionConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.vision_model = _Tower(config, ops, device, dtype)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """The post-normed last hidden state (ComfyUI's ``last_hidden_state`` for SigLIP)."""
        return self.hidden_states(pixels)[0]

    def hidden_states(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The post-normed last hidden state and the penultimate layer's output (the input of the
        last layer; ComfyUI's ``penultimate_hidden_states``)."""
        tower = self.vision_model
        emb = tower.embeddings
        x = emb.patch_embedding(pixels).flatten(2).transpose(1, 2)
        ids = torch.arange(x.shape[1], device=x.device)
        x = x + emb.position_embedding(ids, out_dtype=x.dtype)
        penultimate = x
        for layer in tower.encoder.layers:
            penultimate, x = x, layer(x)
        out: torch.Tensor = tower.post_layernorm(x)
        return out, penultimate
