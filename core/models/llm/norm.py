"""The decoder LLMs' RMS norm (and their vision tower's): float32, as transformers and ComfyUI."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from core.ops.layers import CastWeights


def rms_norm(layer: nn.RMSNorm, x: torch.Tensor, plus_one: bool) -> torch.Tensor:
    """RMSNorm in float32 over the last dim, weight ``w`` (or Gemma's ``1 + w``), back in x's dtype.

    The layer is an op layer (its weight placed, streamed and cast like any other); the ``1 + w``
    is formed from the cast weight, never stored."""
    xf = x.float()
    w = layer.cast_weight_bias(xf)[0] if isinstance(layer, CastWeights) else layer.weight.float()
    if plus_one:
        w = w + 1.0
    return F.rms_norm(xf, (xf.shape[-1],), w, layer.eps).to(x.dtype)
