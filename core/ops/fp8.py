"""fp8 weights: stored in 8 bits, computed upcast everywhere, multiplied in fp8 where the device can.

Two ways to run a layer whose weight is ``float8_e4m3fn`` or ``float8_e5m2``:

* **upcast** (any device): the weight is cast to the input's dtype at forward, like any other
  manual cast. The ordinary op layers already do this; :data:`fp8_upcast_ops` names the choice.
* **fp8 matmul** (NVIDIA CC >= 8.9, AMD gfx950 / gfx12): :class:`Fp8Linear` divides its input by
  the layer's input scale (1 when the file has none, as ComfyUI does), clamps it to e4m3's range,
  quantizes it and multiplies with ``torch._scaled_mm`` with the weight's own scale (a scaled fp8
  file's ``scale_weight``, else 1), accumulating in fp32. Anything it cannot take (another weight
  dtype, odd shapes, a device without fp8 matmul, a weight with a LoRA on it, a file that asks
  for full-precision matmul) falls back to upcast.

A patched fp8 weight (a LoRA) is never rounded back to fp8: every placement applies the patch to
the weight upcast to the compute dtype (``core.quant.fp8_weight``), so small LoRA changes keep
their effect and every placement gives the same bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from core.ops.layers import Linear, OpSet
from core.quant.fp8_weight import FP8_DTYPES, ScaledFp8Weight, quantize_e4m3fn

__all__ = ["FP8_DTYPES", "Fp8Linear", "is_fp8", "scaled_mm_blocker", "scaled_mm_linear", "use_fp8_matmul"]
#: The largest finite e4m3fn value (448): inputs are clamped to it before quantizing.
E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)
#: Activation dtypes ``torch._scaled_mm`` can write.
_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_DTYPES


def fp8_matmul_rule(kind: str, capability: tuple[int, int] | None, arch: str | None) -> bool:
    """Whether a GPU multiplies OCP fp8 natively (pure): NVIDIA CC >= 8.9; AMD gfx950 and gfx12xx
    (MI300's gfx942 has only the fnuz variants, which model files do not use)."""
    if kind == "cuda":
        return capability is not None and capability >= (8, 9)
    if kind == "rocm":
        gfx = (arch or "").split(":", 1)[0].strip().lower()
        return gfx == "gfx950" or gfx.startswith("gfx12")
    return False


def device_has_fp8_matmul(device: torch.device) -> bool:
    """Whether ``device`` (a live one) runs ``torch._scaled_mm`` on e4m3fn operands."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return _cuda_has_fp8_matmul(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _cuda_has_fp8_matmul(index: int) -> bool:
    """Asked once per card (every Fp8Linear forward asks)."""
    props: Any = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        return fp8_matmul_rule("rocm", None, str(getattr(props, "gcnArchName", "")))
    return fp8_matmul_rule("cuda", (int(props.major), int(props.minor)), None)


def scaled_mm_blocker(x: Tensor, weight: Tensor) -> str | None:
    """Why ``scaled_mm_linear(x, weight, ...)`` cannot run, from dtypes and shapes alone; None when
    it can. (Whether the device has fp8 matmul is :func:`device_has_fp8_matmul`'s question.)"""
    if weight.dtype != torch.float8_e4m3fn:
        return f"the weight is {weight.dtype}; fp8 matmul multiplies float8_e4m3fn weights"
    if weight.ndim != 2:
        return f"the weight has {weight.ndim} dimensions; fp8 matmul takes a matrix"
    if x.dtype not in _OUT_DTYPES:
        return f"the input is {x.dtype}; fp8 matmul writes fp16, bf16 or fp32"
    out_features, in_features = weight.shape
    if in_features % 16 or out_features % 16:
        return f"a {out_features}x{in_features} weight; fp8 matmul needs both sides divisible by 16"
    if x.shape[-1] != in_features:
        return f"the input has {x.shape[-1]} features, the weight {in_features}"
    return None


def _scale(s: Tensor | None, device: torch.device) -> Tensor:
    if s is None:
        return torch.ones((), device=device, dtype=torch.float32)
    return s.reshape(()).to(device=device, dtype=torch.float32)


def scaled_mm_linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    weight_scale: Tensor | None = None,
    input_scale: Tensor | None = None,
) -> Tensor:
    """``F.linear(x, weight x weight_scale, bias)`` with e4m3fn ``weight`` values (on ``x``'s
    device) multiplied in fp8: ``x`` is divided by ``input_scale`` (when given), clamped to +-448
    and quantized (a new tensor; ``x`` is not touched), and ``torch._scaled_mm`` applies both
    scales, accumulates in fp32 and writes ``x``'s dtype. cuBLASLt needs the inner and output
    widths divisible by 16, not the row count, so rows are not padded (ComfyUI does not either).
    The scales are passed by name (their position moved between torch releases). Check
    :func:`scaled_mm_blocker` first; the scales should already be on ``x``'s device (a scaled
    fp8 weight keeps its scale beside its values), else each call copies one from the host."""
    shape = x.shape
    rows = x.reshape(-1, shape[-1])
    scale_a = _scale(input_scale, x.device)
    if input_scale is not None:
        rows = rows * (1.0 / scale_a).to(rows.dtype)
    q = rows.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).contiguous()
    out_dtype = x.dtype
    fused = bias is not None and out_dtype in (torch.float16, torch.bfloat16)
    plain = weight.plain() if isinstance(weight, ScaledFp8Weight) else weight
    result: Any = torch._scaled_mm(
        q,
        plain.contiguous().t(),  # column-major, as cuBLASLt wants the second operand
        scale_a=scale_a,
        scale_b=_scale(weight_scale, x.device),
        bias=bias.to(out_dtype) if fused and bias is not None else None,
        out_dtype=out_dtype,
    )
    out: Tensor = result[0] if isinstance(result, tuple) else result  # torch < 2.5 also returned amax
    if bias is not None and not fused:
        out = out + bias.to(out_dtype)
    return out.reshape(*shape[:-1], out.shape[-1])


class Fp8Linear(Linear):
    """A Linear layer that multiplies in fp8 when its weight is e4m3fn and the device can; otherwise
    exactly :class:`core.ops.layers.Linear` (upcast at forward)."""

    def forward(self, x: Tensor) -> Tensor:
        stream = self.stream
        weight = self.weight
        scaled = weight if isinstance(weight, ScaledFp8Weight) else None
        if (
            (stream is None or not stream.patched())  # patched weights are computed upcast
            and (scaled is None or (scaled.patch is None and scaled.fp8_matmul))
            and weight.dtype == torch.float8_e4m3fn
            and scaled_mm_blocker(x, weight) is None
            and device_has_fp8_matmul(x.device)
        ):
            if stream is not None:
                w, b = stream.fetch(weight, self.bias, x.device)
            else:
                w = weight if weight.device == x.device else weight.to(x.device)
                b = self.bias
            # the scales of the copy on the device (a streamed twin's are the cached device ones)
            here = w if isinstance(w, ScaledFp8Weight) else None
            out = scaled_mm_linear(
                x,
                w,
                b if b is None or b.device == x.device else b.to(x.device),
                here.scale if here is not None else None,
                here.input_scale if here is not None else None,
            )
            return self.add_side_outputs(x, out) if self.side_outputs else out
        return super().forward(x)


#: fp8 (or any) weights upcast to the compute dtype per layer: the ordinary manual-cast layers.
fp8_upcast_ops = OpSet(name="fp8_upcast")
#: fp8 matmul for Linear layers (the bulk of a DiT's weights); every other layer upcasts.
fp8_matmul_ops = OpSet(name="fp8_scaled_mm", Linear=Fp8Linear)


def use_fp8_matmul(module: nn.Module, check: Callable[[], None] | None = None) -> tuple[int, int]:
    """Turn a network built from the default op set into one built from :data:`fp8_matmul_ops`,
    in place: every default Linear layer becomes an :class:`Fp8Linear` (which adds no state, only
    its forward), and the weights of those fp8 matmul can take (16-divisible sides) that are not
    already e4m3fn are quantized to e4m3fn with a per-tensor scale (:func:`quantize_e4m3fn`).
    Other layers keep their weights and upcast as before. ``check`` runs before each quantized
    layer (the interrupt). Returns (layers switched, layers quantized)."""
    switched = quantized = 0
    for layer in module.modules():
        if type(layer) is not Linear:
            continue
        layer.__class__ = Fp8Linear
        switched += 1
        weight = layer.weight
        rows, cols = weight.shape
        if weight.dtype == torch.float8_e4m3fn or rows % 16 or cols % 16 or weight.device.type == "meta":
            continue
        if type(weight.data) is not torch.Tensor and not isinstance(weight, ScaledFp8Weight):
            continue  # a quantized (GGUF) weight stays as it is, dequantized per forward
        if check is not None:
            check()
        layer._parameters["weight"] = nn.Parameter(quantize_e4m3fn(weight), requires_grad=False)
        quantized += 1
    return switched, quantized
