"""Which op set a model is built from, given its weight dtype, compute dtype and device (pure).

The dtype policy (``core.memory.dtypes``) decides storage and compute dtypes; this picks the layer
classes that run them and says why:

- ``native``: weights already in the compute dtype; the layers never cast (on the device).
- ``manual_cast``: weights stored in another dtype (fp16 kept on a CPU computing in fp32...), cast
  per layer at forward.
- ``fp8_upcast``: fp8 weights, upcast per layer to the compute dtype. Works on every device that
  holds fp8 tensors.
- ``fp8_scaled_mm``: fp8 matmul, opt-in (compute dtype ``float8_e4m3fn``, as the dtype policy
  spells it), on devices with native fp8 matmul and e4m3fn weights; Linear layers quantize their
  input and multiply in fp8, the rest upcast. Activations then run in ``activation_dtype``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from core.errors import LoadoutError
from core.memory.devices import DeviceInfo
from core.ops.fp8 import fp8_matmul_ops, fp8_upcast_ops, is_fp8
from core.ops.layers import OpSet, default_ops

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16

native_ops = OpSet(name="native")


@dataclass(frozen=True)
class ChosenOps(OpSet):
    """An :class:`OpSet` (a model is built from it directly) with the reasons it was chosen and the
    dtype the model's inputs and activations should be in."""

    activation_dtype: torch.dtype = FP32
    reasons: tuple[str, ...] = ()


def _name(dtype: torch.dtype) -> str:
    names = {FP32: "fp32", FP16: "fp16", BF16: "bf16"}
    return names.get(dtype, str(dtype).removeprefix("torch."))


def _chosen(ops: OpSet, activation: torch.dtype, reasons: list[str]) -> ChosenOps:
    layers = {f.name: getattr(ops, f.name) for f in fields(OpSet)}
    return ChosenOps(**layers, activation_dtype=activation, reasons=tuple(reasons))


def _device_name(device: DeviceInfo) -> str:
    return "the CPU" if device.kind == "cpu" else f"{device.name} ({device.capability_text})"


def _best_16bit(device: DeviceInfo) -> torch.dtype:
    return BF16 if device.supports_bf16 else FP16 if device.supports_fp16 else FP32


def _compute_notes(compute: torch.dtype, device: DeviceInfo) -> list[str]:
    if (compute == FP16 and not device.supports_fp16) or (compute == BF16 and not device.supports_bf16):
        slow = "; ".join(device.notes) or f"{_name(compute)} is slow or unsupported there"
        return [f"note: {_device_name(device)} does not compute {_name(compute)} well ({slow})"]
    return []


def _fp8_matmul(weight: torch.dtype, device: DeviceInfo) -> ChosenOps:
    activation = _best_16bit(device)
    act = _name(activation)
    if not device.supports_fp8_matmul:
        why = (
            f"fp8 matmul was asked for, but {_device_name(device)} has none (it needs NVIDIA CC 8.9+ "
            f"or AMD gfx950/gfx12); fp8 weights are upcast to {act} per layer instead"
        )
        return _chosen(fp8_upcast_ops if is_fp8(weight) else default_ops, activation, [why])
    if weight != torch.float8_e4m3fn:
        why = (
            f"fp8 matmul multiplies float8_e4m3fn weights and these are {_name(weight)}; "
            f"they are cast to {act} per layer instead"
        )
        return _chosen(fp8_upcast_ops if is_fp8(weight) else default_ops, activation, [why])
    why = (
        f"fp8 matmul on {_device_name(device)}: Linear layers quantize their input to e4m3 and "
        f"multiply with torch._scaled_mm; other layers upcast their weights to {act}"
    )
    return _chosen(fp8_matmul_ops, activation, [why, f"activations run in {act}"])


def choose_ops(weight_dtype: torch.dtype, compute_dtype: torch.dtype, device: DeviceInfo) -> ChosenOps:
    """The op set for a model whose weights are stored in ``weight_dtype`` and computed in
    ``compute_dtype`` on ``device`` (a :class:`DeviceInfo`, real or simulated), with reasons."""
    if not compute_dtype.is_floating_point:
        raise LoadoutError(
            f"cannot compute in {compute_dtype}",
            why="layers compute in a floating-point dtype",
            fix="choose fp32, fp16, bf16 (or fp8_e4m3fn for fp8 matmul)",
            code="bad_dtype",
        )
    if is_fp8(weight_dtype) and not device.supports_fp8:
        raise LoadoutError(
            f"{_device_name(device)} cannot hold {_name(weight_dtype)} weights",
            why=f"{device.kind.upper()} has no fp8 tensors",
            fix="load the weights upcast to a 16-bit dtype (the dtype policy does this automatically)",
            code="bad_dtype",
        )
    if is_fp8(compute_dtype):
        return _fp8_matmul(weight_dtype, device)
    notes = _compute_notes(compute_dtype, device)
    w, c = _name(weight_dtype), _name(compute_dtype)
    if is_fp8(weight_dtype):
        why = f"{w} weights stay in 8 bits (half of 16-bit memory) and are upcast to {c} per layer"
        if device.supports_fp8_matmul:
            why += "; fp8 matmul is available here but opt-in (compute fp8_e4m3fn)"
        return _chosen(fp8_upcast_ops, compute_dtype, [why, *notes])
    if weight_dtype == compute_dtype:
        return _chosen(native_ops, compute_dtype, [f"weights are already {c}: no cast at forward", *notes])
    why = f"weights stored in {w} are cast to {c} per layer at forward (manual cast)"
    return _chosen(default_ops, compute_dtype, [why, *notes])
