"""Cast-at-forward layers.

Every network in ``core.models`` is built from an :class:`OpSet`, never from ``torch.nn`` layers
directly. These layers

* skip random initialisation (weights always come from a file, so initialising them is wasted
  time: building an SDXL UNet takes milliseconds);
* cast weight and bias to the input's device and dtype at forward when they differ ("manual
  cast"), without ever changing the stored parameters;
* while streamed (``core.ops.streaming``), get fresh, patched copies of their weights at forward
  from the object in their one declared ``stream`` slot;
* materialize a deferred weight (``core.quant.tensor.DeferredWeight``: GGUF blocks, scaled or
  LoRA-patched fp8) per forward into the input's dtype on the input's device, then apply its
  placed patches (a LoRA), then compute: nothing dense is kept between forwards and nothing is
  ever requantized.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn

from core.quant.tensor import DeferredWeight

if TYPE_CHECKING:
    from core.ops.streaming import LayerStream


def cast_to(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """``t`` on ``like``'s device and dtype; the same tensor object when nothing changes."""
    if t is None:
        return None
    if t.device == like.device and t.dtype == like.dtype:
        return t
    return t.to(device=like.device, dtype=like.dtype, non_blocking=True)


#: An extra output added after a layer's own (a LoRA running unbaked beside its weight):
#: ``side(layer, input, output) -> output``.
SideOutput = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def _plain(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` as a plain tensor (no autograd flag, same storage). CPU kernels pick another code path
    for a weight that requires grad, even under ``no_grad`` (``F.linear`` on a non-contiguous input
    gives other bits), while streamed and patched copies never do: every path computes with plain
    tensors, so placement cannot change a result."""
    return None if t is None else t.detach()


class CastWeights:
    """Mixin: the weight and bias to compute with for one input, cast as needed.

    ``side_outputs`` are added to the layer's output (empty by default; an immutable tuple that
    the patcher replaces per instance while a LoRA slider moves)."""

    side_outputs: tuple[SideOutput, ...] = ()
    #: Set per instance by ``core.ops.streaming.stream_layers`` while the layer is streamed (its
    #: weights stay in host memory and are copied, patched and cast at each forward); None otherwise.
    stream: LayerStream | None = None

    def add_side_outputs(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for side in self.side_outputs:
            out = side(cast(nn.Module, self), x, out)
        return out

    def reset_parameters(self) -> None:  # no random init: weights come from the file
        return None

    def cast_weight_bias(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight: torch.Tensor = getattr(self, "weight")  # noqa: B009 - set by the torch base class
        bias: torch.Tensor | None = getattr(self, "bias", None)
        if self.stream is not None:
            return self.stream.cast(weight, bias, x.device, x.dtype)
        if isinstance(weight, DeferredWeight):  # materialized per forward, on the computing device
            return weight.materialize(x.dtype, x.device), _plain(cast_to(bias, x))
        w = _plain(cast_to(weight, x))
        assert w is not None
        return w, _plain(cast_to(bias, x))


class Linear(CastWeights, nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.cast_weight_bias(x)
        out = F.linear(x, w, b)
        return self.add_side_outputs(x, out) if self.side_outputs else out


class Conv1d(CastWeights, nn.Conv1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.cast_weight_bias(x)
        out: torch.Tensor = self._conv_forward(x, w, b)
        return out


class Conv2d(CastWeights, nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.cast_weight_bias(x)
        out: torch.Tensor = self._conv_forward(x, w, b)
        return self.add_side_outputs(x, out) if self.side_outputs else out


class Conv3d(CastWeights, nn.Conv3d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.cast_weight_bias(x)
        out: torch.Tensor = self._conv_forward(x, w, b)
        return out


class ConvTranspose1d(CastWeights, nn.ConvTranspose1d):
    def forward(self, x: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        pad = self._output_padding(
            x,
            output_size,
            list(self.stride),
            list(self.padding),  # type: ignore[arg-type]
            list(self.kernel_size),
            1,
            list(self.dilation),
        )
        w, b = self.cast_weight_bias(x)
        padding = cast(tuple[int, ...], self.padding)
        return F.conv_transpose1d(x, w, b, self.stride, padding, pad, self.groups, self.dilation)


class ConvTranspose2d(CastWeights, nn.ConvTranspose2d):
    def forward(self, x: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        pad = self._output_padding(
            x,
            output_size,
            list(self.stride),
            list(self.padding),  # type: ignore[arg-type]
            list(self.kernel_size),
            2,
            list(self.dilation),
        )
        w, b = self.cast_weight_bias(x)
        padding = cast(tuple[int, ...], self.padding)
        return F.conv_transpose2d(x, w, b, self.stride, padding, pad, self.groups, self.dilation)


class GroupNorm(CastWeights, nn.GroupNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None:
            return F.group_norm(x, self.num_groups, None, None, self.eps)
        w, b = self.cast_weight_bias(x)
        return F.group_norm(x, self.num_groups, w, b, self.eps)


class LayerNorm(CastWeights, nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None:
            return F.layer_norm(x, self.normalized_shape, None, None, self.eps)
        w, b = self.cast_weight_bias(x)
        return F.layer_norm(x, self.normalized_shape, w, b, self.eps)


class RMSNorm(CastWeights, nn.RMSNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.cast_weight_bias(x)[0] if self.weight is not None else None
        return F.rms_norm(x, self.normalized_shape, w, self.eps)


class Embedding(CastWeights, nn.Embedding):
    def forward(self, x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
        w = self.weight
        if self.stream is not None:
            rows = self.stream.look_up(w, x, x.device, out_dtype)  # only the rows looked up travel
            if rows is not None:
                return rows if out_dtype is None else rows.to(out_dtype)
            w = self.stream.cast(w, None, x.device, None)[0]  # indices in, so the stored dtype is kept
        elif isinstance(w, DeferredWeight) and self.padding_idx is None and self.max_norm is None:
            return w.rows(x, out_dtype or torch.float32)  # only the rows looked up are decoded
        elif isinstance(w, DeferredWeight):
            w = w.materialize(out_dtype or torch.float32, x.device)
        elif w.device != x.device:
            w = w.to(x.device)
        out = F.embedding(
            x, w, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse
        )
        return out if out_dtype is None else out.to(out_dtype)


@dataclass(frozen=True)
class OpSet:
    """The layer classes one model is built from. Networks take ``ops: OpSet`` and use
    ``ops.Linear(...)`` etc., so the memory manager can swap in streaming or fp8 variants."""

    name: str = "manual_cast"
    Linear: type[nn.Linear] = Linear
    Conv1d: type[nn.Conv1d] = Conv1d
    Conv2d: type[nn.Conv2d] = Conv2d
    Conv3d: type[nn.Conv3d] = Conv3d
    ConvTranspose1d: type[nn.ConvTranspose1d] = ConvTranspose1d
    ConvTranspose2d: type[nn.ConvTranspose2d] = ConvTranspose2d
    GroupNorm: type[nn.GroupNorm] = GroupNorm
    LayerNorm: type[nn.LayerNorm] = LayerNorm
    RMSNorm: type[nn.RMSNorm] = RMSNorm
    Embedding: type[nn.Embedding] = Embedding


default_ops = OpSet()
