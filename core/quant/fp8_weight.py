"""fp8 weights kept in fp8: the file's values plus the per-tensor scale they are multiplied by.

ComfyUI's ``*_fp8_scaled`` files store each large weight as ``float8_e4m3fn`` values ``q`` and a
float32 scale ``s`` beside it (``<layer>.scale_weight``, or ``<layer>.weight_scale`` in the newer
``comfy_quant`` layout); the weight is ``q x s``. :class:`ScaledFp8Weight` is a ``torch.Tensor``
subclass whose data is ``q`` itself (a zero-copy view of the memory-mapped file, shape and dtype
as stored, so every byte count is the real one) carrying ``s``. The op layers call
:meth:`ScaledFp8Weight.materialize` per forward: ``q`` is moved to the computing device as fp8 (one
byte per weight crosses the bus), cast to the compute dtype there and multiplied by ``s`` cast to
the same dtype -- ComfyUI's order (``q.to(dtype) * s.to(dtype)``) -- then a LoRA placed on it is
applied in the compute dtype. Nothing is ever rounded back to fp8.

A plain fp8 weight (no scale) that gets a LoRA is wrapped the same way with ``scale=None``, so a
small LoRA is applied to the upcast weight at every forward in every placement instead of being
rounded away by an fp8 round trip when baked.

``.to(dtype)`` to a wider floating dtype gives the weight's values (scale and patch applied), so
code that converts weights (saving with ``--dtype``, loading with a dtype) gets the right numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from core.quant.tensor import DeferredWeight

FP8_DTYPES: tuple[torch.dtype, ...] = (torch.float8_e4m3fn, torch.float8_e5m2)


class ScaledFp8Weight(DeferredWeight):
    """fp8 values with an optional per-tensor ``scale`` (a one-element float tensor), an optional
    ``input_scale`` (for fp8 matmul) and whether fp8 matmul may be used on it at all."""

    scale: Tensor | None
    input_scale: Tensor | None
    fp8_matmul: bool
    #: the scales' copies on each device the values went to, shared by every twin of one file
    #: tensor: made once (at placement, or when a streamed layer is set up), so no forward copies
    #: a scale from the host (each such copy would wait for the card)
    _scales_on: dict[torch.device, tuple[Tensor | None, Tensor | None]]

    @staticmethod
    def __new__(
        cls,
        data: Tensor,
        scale: Tensor | None,
        input_scale: Tensor | None = None,
        fp8_matmul: bool = True,
    ) -> ScaledFp8Weight:
        if data.dtype not in FP8_DTYPES:
            raise TypeError(f"scaled fp8 weights hold float8 values, not {data.dtype}")
        for name, s in (("scale", scale), ("input scale", input_scale)):
            if s is not None and (s.numel() != 1 or not s.is_floating_point()):
                what = f"{tuple(s.shape)} {s.dtype}"
                raise ValueError(f"the {name} must be one floating-point number, not {what}")
        out = Tensor._make_subclass(cls, data, False)
        out.scale = scale
        out.input_scale = input_scale
        out.fp8_matmul = fp8_matmul
        out.patch = None
        out._scales_on = {}
        return out

    def __init__(
        self,
        data: Tensor,
        scale: Tensor | None,
        input_scale: Tensor | None = None,
        fp8_matmul: bool = True,
    ) -> None:
        super().__init__()

    def __repr__(self, **_: Any) -> str:  # type: ignore[override]
        s = "none" if self.scale is None else f"{float(self.scale.reshape(())):.6g}"
        return f"ScaledFp8Weight({self.dtype}, shape={tuple(self.shape)}, scale={s}, {self.device})"

    def __deepcopy__(self, memo: dict[int, Any]) -> ScaledFp8Weight:
        return self._twin(self.plain().clone())

    def __reduce_ex__(self, proto: Any) -> Any:
        return (ScaledFp8Weight, (self.plain().clone(), self.scale, self.input_scale, self.fp8_matmul))

    def _twin(self, data: Tensor) -> ScaledFp8Weight:
        scale, input_scale = self.scales_on(data.device)
        twin = ScaledFp8Weight(data, scale, input_scale, self.fp8_matmul)
        twin.patch = self.patch
        twin._scales_on = self._scales_on
        return twin

    def scales_on(self, device: torch.device) -> tuple[Tensor | None, Tensor | None]:
        """(scale, input scale) on ``device``: the copies made the first time it was asked for."""
        here = [s for s in (self.scale, self.input_scale) if s is not None]
        if all(s.device == device for s in here):
            return self.scale, self.input_scale
        found = self._scales_on.get(device)
        if found is None:
            found = self._scales_on[device] = (
                _moved_to(self.scale, device),
                _moved_to(self.input_scale, device),
            )
        return found

    def prepare(self, device: torch.device) -> None:
        self.scales_on(device)

    def _moved(self, out: Tensor) -> Tensor:
        if self._keeps(out):
            return self._twin(out)
        if out.is_floating_point() and out.dtype not in FP8_DTYPES and out.shape == self.shape:
            return self.materialize(out.dtype, out.device)  # ``.to(dtype)``: the weight's values
        return out

    def decoded(self, dtype: torch.dtype, device: torch.device | str | None = None) -> Tensor:
        if dtype in FP8_DTYPES:
            raise ValueError("a scaled fp8 weight is computed in a wider dtype than fp8")
        q = self.plain()
        if device is not None and q.device != torch.device(device):
            q = q.to(device, non_blocking=True)  # fp8 bytes cross the bus, not the upcast weight
        w = q.to(dtype)  # a fresh tensor (the dtype differs): scaling it in place is safe
        if self.scale is not None:
            w.mul_(self.scale.reshape(()).to(device=w.device, dtype=dtype))
        return w

    def rows(self, ids: Tensor, dtype: torch.dtype) -> Tensor:
        """An fp8 embedding's rows for ``ids``: only they are sent (as fp8) and scaled on ``ids``'
        device, in ComfyUI's order, so each value is the one the whole table would give."""
        if self.patch is not None or self.ndim != 2:
            return super().rows(ids, dtype)
        picked = self.plain()[ids.reshape(-1).to(self.device)]
        scale, _ = self.scales_on(ids.device)
        w = picked.to(ids.device, non_blocking=True).to(dtype)
        if scale is not None:
            w.mul_(scale.reshape(()).to(dtype))
        return w.reshape(*ids.shape, self.shape[1])

    @property
    def scale_value(self) -> float:
        return 1.0 if self.scale is None else float(self.scale.reshape(()))


def _moved_to(t: Tensor | None, device: torch.device) -> Tensor | None:
    return None if t is None else t.to(device, non_blocking=True)


def fp8_with_patch(weight: Tensor, patch: Callable[[Tensor], Tensor]) -> ScaledFp8Weight:
    """``weight`` (a plain fp8 tensor or a :class:`ScaledFp8Weight`) with ``patch`` applied to its
    upcast values at each forward: the same bytes, no copy, never requantized."""
    if isinstance(weight, ScaledFp8Weight):
        twin = weight._twin(weight.plain())
    else:
        twin = ScaledFp8Weight(weight.detach(), None)
    twin.patch = patch
    return twin


#: The largest finite e4m3fn value (448).
_E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)


def quantize_e4m3fn(weight: Tensor) -> ScaledFp8Weight:
    """``weight`` (a floating tensor in any wider dtype, or fp8 e5m2) as e4m3fn values with one
    per-tensor scale (``amax / 448``, fp32), the layout of a ``*_fp8_scaled`` file: the largest
    value maps to e4m3's largest, so nothing saturates. Computed in fp32 one tensor at a time."""
    w = weight.detach().to(torch.float32)
    amax = float(w.abs().max()) if w.numel() else 0.0
    scale = torch.tensor(amax / _E4M3_MAX if amax > 0.0 else 1.0, dtype=torch.float32)
    q = (w / scale).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn)
    return ScaledFp8Weight(q, scale)
