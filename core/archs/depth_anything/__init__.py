"""Depth Anything V2 (a preprocessor network: picture -> relative depth): the network from op layers
(:mod:`.net`) and the two file layouts it is read from (:mod:`.keys`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from core.archs.depth_anything.keys import UNUSED, config_from_shapes, file_shapes_as_module, sources
from core.archs.depth_anything.net import PATCH, DepthAnythingConfig, DepthAnythingV2
from core.archs.preprocessors import PreprocessorNet


def _build(cfg: Any, device: str) -> nn.Module:
    return DepthAnythingV2(cfg, device=device)


def activation_bytes(cfg: DepthAnythingConfig, height: int, width: int) -> int:
    """A float32 run's largest live tensors: the tokens through a block (the MLP's 4x and the
    attention scores of one head at a time), the tapped maps, and the head at full size."""
    tokens = (height // PATCH) * (width // PATCH) + 1
    blocks = tokens * (cfg.width * 4 + cfg.mlp + tokens) + 4 * tokens * cfg.width
    head = height * width * (cfg.features + 32 + 2) + 16 * tokens * cfg.features * 4
    return 4 * 2 * (blocks + head)


PREPROCESSOR = PreprocessorNet(
    "depth-anything-v2", "Depth Anything V2", config_from_shapes, _build, sources,
    lambda shapes, mapped, layout: file_shapes_as_module(shapes, mapped, layout),
    activation_bytes,
)  # fmt: skip

__all__ = ["PREPROCESSOR", "UNUSED", "DepthAnythingConfig", "DepthAnythingV2"]
