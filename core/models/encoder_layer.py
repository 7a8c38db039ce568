"""The pre-norm transformer encoder layer of the vision towers image prompts read (CLIP's and
SigLIP's, in the transformers layout): ``layer_norm1``, ``self_attn.{q,k,v,out}_proj``,
``layer_norm2``, ``mlp.fc1`` / ``mlp.fc2``, built from ``core.ops`` layers; only the MLP's
activation differs between the towers (:data:`ACTIVATIONS`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.models.attention import attention
from core.ops.layers import OpSet


def _quick_gelu(h: torch.Tensor) -> torch.Tensor:
    return h * torch.sigmoid(1.702 * h)


def _gelu_tanh(h: torch.Tensor) -> torch.Tensor:
    return F.gelu(h, approximate="tanh")


#: the MLP activations by transformers' ``hidden_act`` name
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "quick_gelu": _quick_gelu,
    "gelu_pytorch_tanh": _gelu_tanh,
}


class _SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.heads = heads
        self.k_proj = ops.Linear(width, width, device=device, dtype=dtype)
        self.v_proj = ops.Linear(width, width, device=device, dtype=dtype)
        self.q_proj = ops.Linear(width, width, device=device, dtype=dtype)
        self.out_proj = ops.Linear(width, width, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.out_proj(
            attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.heads)
        )
        return out


class _Mlp(nn.Module):
    def __init__(
        self, width: int, inner: int, act: str, ops: OpSet, device: Any, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.act = ACTIVATIONS[act]
        self.fc1 = ops.Linear(width, inner, device=device, dtype=dtype)
        self.fc2 = ops.Linear(inner, width, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(self.act(self.fc1(x)))
        return out


class EncoderLayer(nn.Module):
    """``x + attn(norm1(x))``, then ``+ mlp(norm2(.))``: ``[B, L, width]`` -> the same."""

    def __init__(
        self, width: int, heads: int, inner: int, act: str, eps: float, ops: OpSet, device: Any,
        dtype: torch.dtype | None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.self_attn = _SelfAttention(width, heads, ops, device, dtype)
        self.layer_norm1 = ops.LayerNorm(width, eps=eps, device=device, dtype=dtype)
        self.mlp = _Mlp(width, inner, act, ops, device, dtype)
        self.layer_norm2 = ops.LayerNorm(width, eps=eps, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        out: torch.Tensor = x + self.mlp(self.layer_norm2(x))
        return out
