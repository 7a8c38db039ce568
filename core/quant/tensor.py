"""Quantized weights held as what they are: the file's bytes plus how to read them.

:class:`QuantizedWeight` is a ``torch.Tensor`` subclass whose data is the raw uint8 bytes of GGML
blocks (a zero-copy view of the memory-mapped GGUF file when loaded) and which carries the GGML
type and the logical shape. It goes wherever a weight goes -- a module's parameter slot, the
memory manager's byte counts (``nbytes`` is the real, quantized size), a streamed layer's copy to
the device (``.to`` keeps it quantized, so fewer bytes cross the bus) -- and is turned into numbers
only by :meth:`dequantize`, which the op layers call per forward, on the computing device.

Only moving operations keep the subclass (``to``, ``detach``, ``clone``, ``cpu``, ``cuda``,
``pin_memory``, ``contiguous``, ``.data``); any other torch operation on it sees plain bytes, so a
layer that forgot to dequantize fails loudly on a shape mismatch instead of computing garbage
quietly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from core.quant.dequant import dequantize
from core.quant.gguf_types import BY_NAME

_KEEP = frozenset(
    {"to", "detach", "clone", "cpu", "cuda", "pin_memory", "contiguous", "__get__", "share_memory_"}
)


class DeferredWeight(Tensor):
    """A weight stored as something other than its values, turned into values only by
    :meth:`materialize`, which the op layers call per forward on the computing device, then
    applying :attr:`patch` (a LoRA stack placed on it, in the compute dtype).

    Only moving operations keep the subclass (``to`` to another device, ``detach``, ``clone``,
    ``pin_memory``, ``.data``...): the twin shares the storage's meaning (type, scale, patch).
    Subclasses say what the stored data is: :class:`QuantizedWeight` (GGML block bytes) and
    ``core.quant.fp8_weight.ScaledFp8Weight`` (fp8 values with a per-tensor scale)."""

    #: Set on a *placed* copy by the patcher (never on the file's tensor): applied to the
    #: materialized weight at forward, so a LoRA changes the layer without requantizing it and
    #: without holding a dense copy.
    patch: Callable[[Tensor], Tensor] | None

    def _twin(self, data: Tensor) -> DeferredWeight:
        """The same kind of weight over ``data`` (a plain tensor like :meth:`plain`), same patch.
        Abstract: each subclass defines it (a torch.Tensor subclass cannot use ABCMeta)."""
        raise NotImplementedError(f"{type(self).__name__} must define _twin")

    def prepare(self, device: torch.device) -> None:
        """Make what computing on ``device`` needs besides the stored bytes (an fp8 scale's copy)
        before any forward, so that no forward copies from the host (the streamed-layer setup
        calls it)."""

    def _keeps(self, out: Tensor) -> bool:
        return out.dtype == self.dtype and out.shape == self.shape

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        src = args[0] if args and isinstance(args[0], DeferredWeight) else None
        if src is not None and getattr(func, "__name__", "") in _KEEP and type(out) is Tensor:
            return src._moved(out)
        return out

    def _moved(self, out: Tensor) -> Tensor:
        """What a moving operation returns: a twin when ``out`` holds the same kind of data."""
        return self._twin(out) if self._keeps(out) else out

    def plain(self) -> Tensor:
        """The stored data as a plain tensor (a view, no copy)."""
        with torch._C.DisableTorchFunctionSubclass():
            return self.as_subclass(Tensor)

    def with_patch(self, patch: Callable[[Tensor], Tensor] | None) -> DeferredWeight:
        """The same data (no copy) with ``patch`` applied after materializing."""
        twin = self._twin(self.plain())
        twin.patch = patch
        return twin

    def decoded(self, dtype: torch.dtype, device: torch.device | str | None = None) -> Tensor:
        """The weight's values, unpatched, in ``dtype`` on ``device`` (default: where it is).
        Abstract: each subclass defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define decoded")

    def materialize(self, dtype: torch.dtype, device: torch.device | str | None = None) -> Tensor:
        """What a layer computes with: the values in ``dtype`` on ``device``, then patched."""
        dense_w = self.decoded(dtype, device)
        return dense_w if self.patch is None else self.patch(dense_w)

    def rows(self, ids: Tensor, dtype: torch.dtype) -> Tensor:
        """``F.embedding(ids, values)`` on ``ids``' device. Subclasses whose rows can be read
        alone (GGML blocks, fp8 values) send and decode only those; this default decodes all."""
        return torch.nn.functional.embedding(ids, self.materialize(dtype, ids.device))

    @property
    def logical_shape(self) -> torch.Size:
        return self.shape


class QuantizedWeight(DeferredWeight):
    """GGML-quantized weight: uint8 block bytes, ``qtype`` (e.g. "Q4_K") and ``qshape``."""

    qtype: str
    qshape: torch.Size

    @staticmethod
    def __new__(cls, raw: Tensor, qtype: str, qshape: tuple[int, ...]) -> QuantizedWeight:
        if raw.dtype != torch.uint8:
            raise TypeError(f"quantized bytes must be uint8, not {raw.dtype}")
        spec = BY_NAME[qtype]
        if raw.numel() != spec.nbytes(math.prod(qshape)) or math.prod(qshape) % spec.block:
            raise ValueError(f"{raw.numel()} bytes of {qtype} cannot hold a {tuple(qshape)} tensor")
        out = Tensor._make_subclass(cls, raw.reshape(-1), False)
        out.qtype = qtype
        out.qshape = torch.Size(qshape)
        out.patch = None
        return out

    def __init__(self, raw: Tensor, qtype: str, qshape: tuple[int, ...]) -> None:
        super().__init__()

    def __repr__(self, **_: Any) -> str:  # type: ignore[override]
        return (
            f"QuantizedWeight({self.qtype}, shape={tuple(self.qshape)}, {self.numel()} bytes, {self.device})"
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> QuantizedWeight:
        twin = QuantizedWeight(self.raw().clone(), self.qtype, tuple(self.qshape))
        twin.patch = self.patch
        return twin

    def __reduce_ex__(self, proto: Any) -> Any:
        return (QuantizedWeight, (self.raw().clone(), self.qtype, tuple(self.qshape)))

    def _twin(self, data: Tensor) -> QuantizedWeight:
        twin = QuantizedWeight(data, self.qtype, tuple(self.qshape))
        twin.patch = self.patch
        return twin

    def raw(self) -> Tensor:
        """The bytes as a plain uint8 tensor (a view)."""
        return self.plain()

    @property
    def logical_shape(self) -> torch.Size:
        return self.qshape

    @property
    def logical_numel(self) -> int:
        return math.prod(self.qshape)

    def dequantize(
        self, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
    ) -> Tensor:
        """The weight's values, ``qshape``, in ``dtype`` on ``device`` (default: where the bytes
        are). The bytes are moved first (fewer of them), then dequantized there."""
        return dequantize(self.raw(), self.qtype, tuple(self.qshape), dtype, device)

    def decoded(self, dtype: torch.dtype, device: torch.device | str | None = None) -> Tensor:
        return self.dequantize(dtype, device)

    def rows(self, ids: Tensor, dtype: torch.dtype) -> Tensor:
        """``F.embedding(ids, values)`` without dequantizing the whole table: a row of a 2-D weight
        is a whole number of blocks, so only the rows asked for are moved to ``ids``' device and
        dequantized (a T5 vocabulary is 32k-256k rows; a prompt uses a few dozen). The patch, if
        any, needs the whole table, so a patched weight is materialized instead."""
        if self.patch is not None or len(self.qshape) != 2:
            return torch.nn.functional.embedding(ids, self.materialize(dtype, ids.device))
        n_rows, width = self.qshape
        picked = self.raw().view(n_rows, -1)[ids.reshape(-1).to(self.device)]
        values = dequantize(picked.reshape(-1), self.qtype, (picked.shape[0], width), dtype, ids.device)
        return values.reshape(*ids.shape, width)


def is_quantized(t: object) -> bool:
    return isinstance(t, QuantizedWeight)


def is_deferred(t: object) -> bool:
    """Whether ``t`` is a weight the op layers materialize per forward (GGUF blocks, scaled fp8)."""
    return isinstance(t, DeferredWeight)


def logical_shape(t: Tensor) -> tuple[int, ...]:
    """The shape a weight stands for: ``qshape`` for a quantized one, else ``t.shape``."""
    return tuple(t.logical_shape) if isinstance(t, DeferredWeight) else tuple(t.shape)


def dense(t: Tensor, dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Tensor:
    """``t`` as an ordinary tensor: dequantized when quantized (``dtype`` default float32), else
    ``t`` itself (cast when ``dtype``/``device`` are given)."""
    if isinstance(t, DeferredWeight):
        return t.materialize(dtype or torch.float32, device)
    if (dtype is not None and t.dtype != dtype) or (device is not None and t.device != torch.device(device)):
        return t.to(device=device, dtype=dtype)
    return t
