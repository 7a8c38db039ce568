"""DoRA (weight-decomposed LoRA): the magnitude/direction epilogue shared by LoRA, LoHa and LoKr.

With ``W`` the current weight, ``dW`` the scaled low-rank product and ``m`` the stored magnitude
(``dora_scale``), the full-strength weight is ``W1 = m * (W + dW) / ||W + dW||`` and a strength
``s`` gives ``W + s * (W1 - W)`` (ComfyUI's interpolation; strength 0 is a no-op).

The norm is taken per channel along one axis, over every other dimension:

- ``"out"``: one norm per output channel, over ``(in, *kernel)``. PEFT (``lora_magnitude_vector``:
  ``(out,)`` for linear, ``(1, out, 1, 1)`` for conv, the latter transposed from ``(out, 1, 1, 1)``)
  and LyCORIS >= 3 (``wd_on_out=True``, the default: ``dora_scale`` of shape ``(out, 1[, 1, 1])``).
- ``"in"``: one norm per input channel, over ``(out, *kernel)``. Kohya sd-scripts and LyCORIS 2.x
  (``wd_on_out=False``): ``dora_scale`` of shape ``(1, in[, 1, 1])``.

``axis=None`` infers the axis from the scale's shape as ComfyUI does: a leading dim other than 1
(or a 1-D scale) means "out", a leading 1 means "in". A PEFT conv magnitude ``(1, out, 1, 1)``
would read as "in": pass ``axis="out"`` for it. ComfyUI's own "out" branch takes the norm of ``W``
rather than ``W + dW``; this module follows PEFT and LyCORIS (``W + dW``), verified in the tests.
A machine epsilon is added to the norm (as LyCORIS and ComfyUI do) so a zero row cannot divide by 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from core.patching.adapters.errors import shape_mismatch


def resolve_axis(dora_scale: Tensor, weight_shape: Sequence[int], axis: str | None, module: str = "") -> str:
    """The normalisation axis ("out" or "in"), checked against the weight; else ``shape_mismatch``."""
    if axis is None:
        axis = "in" if dora_scale.ndim >= 2 and dora_scale.shape[0] == 1 else "out"
    if len(weight_shape) < 2:
        raise shape_mismatch(module, list(dora_scale.shape), weight_shape, "DoRA needs a 2-D or conv weight")
    channels = weight_shape[0] if axis == "out" else weight_shape[1]
    if dora_scale.numel() != channels:
        raise shape_mismatch(
            module,
            list(dora_scale.shape),
            weight_shape,
            f"the DoRA magnitude must hold one value per {'output' if axis == 'out' else 'input'} "
            f"channel ({channels}); a PEFT conv magnitude needs dora_axis='out'",
        )
    return axis


def channel_norm(weight: Tensor, axis: str) -> Tensor:
    """L2 norm per channel of ``axis`` over all other dims, keepdim (``(out, 1, ...)``/``(1, in, ...)``)."""
    keep = 0 if axis == "out" else 1
    dims = tuple(d for d in range(weight.ndim) if d != keep)
    norm: Tensor = torch.linalg.vector_norm(weight, dim=dims, keepdim=True)
    return norm


def dora_weight(weight: Tensor, delta: Tensor, dora_scale: Tensor, axis: str) -> Tensor:
    """The full-strength DoRA weight ``m * (W + dW) / (||W + dW|| + eps)`` (pure, same dtype)."""
    merged = weight + delta
    norm = channel_norm(merged, axis) + torch.finfo(merged.dtype).eps
    magnitude = dora_scale.to(device=merged.device, dtype=merged.dtype).reshape(norm.shape)
    return merged * (magnitude / norm)


def dora_difference(
    weight: Tensor,
    delta: Tensor,
    dora_scale: Tensor,
    strength: float,
    *,
    axis: str | None = None,
    module: str = "",
) -> Tensor:
    """``s * (W1 - W)``: what a DoRA adapter adds to ``weight`` at ``strength``."""
    resolved = resolve_axis(dora_scale, weight.shape, axis, module)
    return (dora_weight(weight, delta, dora_scale, resolved) - weight) * strength
