"""Layer classes that cast (and later stream and patch) weights at forward time."""

from core.ops.layers import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    Embedding,
    GroupNorm,
    LayerNorm,
    Linear,
    OpSet,
    RMSNorm,
    default_ops,
)

__all__ = [
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "OpSet",
    "RMSNorm",
    "default_ops",
]
