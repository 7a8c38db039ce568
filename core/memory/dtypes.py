"""Dtype policy: in which dtype each model component is stored and computed, and why.

``storage`` is the dtype the weights occupy memory in; ``compute`` is the dtype the layers run in.
When they differ the weights are cast per layer at forward time (``manual_cast``), which is how
fp8 checkpoints run on any card and how fp16 weights run on a CPU without doubling RAM.

The rules (ComfyUI's, corrected where it is known to fail):

- compute: a family's preferred dtype (``Family.default_dtype``) when the device computes it well,
  else the other 16-bit dtype when the family tolerates it, else fp32. fp16 only where the device is
  fast and correct in it (CC >= 7 except GTX 16-series; full-rate Pascal GP100), bf16 on CC >= 8,
  ROCm except RDNA1/2 and Vega, MPS on macOS 14+. A checkpoint already stored in a 16-bit dtype
  the device and family accept is computed in that dtype (no lossy conversion).
- families that overflow in fp16 (ComfyUI lists bf16/fp32 only: Flux Fill, Qwen-Image, HiDream,
  Lumina 2, Z-Image, HunyuanVideo, LTX-Video, Cascade C; LLM text encoders) never compute in fp16.
- VAEs never compute in fp16 automatically (the SDXL VAE overflows to NaN and SD VAEs cannot be told
  apart by shapes): bf16 where native (not on AMD, where bf16 convolutions are slow), else fp32.
- storage: fp8 weights stay fp8 where the device holds fp8 tensors (not MPS/XPU); 16-bit weights
  stay as they are when computing in fp32 (CPU, GTX 16-series, Pascal); otherwise the compute dtype.
- fp8 matmul is opt-in (a compute override of ``fp8_e4m3fn``) and only on CC >= 8.9 / gfx950 / gfx12.
- user overrides win unless the device cannot represent the dtype at all; the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import torch

from core.detect.catalog import REGISTRY
from core.detect.registry import Registry
from core.files.dtypes import DTYPES, torch_dtype_by_short
from core.files.dtypes import short_name as files_short_name
from core.memory.devices import DeviceInfo
from core.memory.policy import ROLES, MemorySettings, SettingsError

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
FP8_TYPES = (torch.float8_e4m3fn, torch.float8_e5m2)

#: Families whose activations overflow fp16 (their records say so: ``Family.fp16_unsafe``).
FP16_UNSAFE: frozenset[str] = frozenset(f.id for f in REGISTRY if f.fp16_unsafe)

#: the dtypes a setting or a family preference may name, in the order an error lists them
SETTING_DTYPES = ("fp32", "fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2", "fp64")


def short_name(dtype: torch.dtype) -> str:
    """The name sentences use for a dtype: "fp16" for torch.float16 (``core.files.dtypes``)."""
    return files_short_name(dtype)


def to_dtype(value: torch.dtype | str) -> torch.dtype:
    """A torch dtype from a torch dtype, a short name ("bf16") or a safetensors name ("BF16")."""
    if isinstance(value, torch.dtype):
        return value
    found = torch_dtype_by_short(value) if value in SETTING_DTYPES else None
    info = DTYPES.get(value)
    if found is None and info is not None:
        found = info.torch_dtype
    if found is None:
        raise SettingsError(f"unknown dtype {value!r}", fix=f"use one of: {', '.join(SETTING_DTYPES)}")
    return found


@dataclass(frozen=True)
class DtypeChoice:
    storage: torch.dtype
    compute: torch.dtype
    manual_cast: bool  # storage != compute: weights are cast per layer at forward time
    reason: str
    #: the dtype inputs and activations run in when ``compute`` is fp8 (fp8 matmul: Linear layers
    #: quantize their input, everything else computes in this); None: ``compute`` itself
    activation: torch.dtype | None = None

    @property
    def activation_dtype(self) -> torch.dtype:
        """The dtype of the latent, the conditioning and every activation: never fp8."""
        return self.activation if self.activation is not None else self.compute

    def __post_init__(self) -> None:
        if self.manual_cast != (self.storage != self.compute):
            raise ValueError("manual_cast must be True exactly when storage and compute differ")


def can_store(device: DeviceInfo, dtype: torch.dtype) -> bool:
    """Whether tensors of ``dtype`` can live on ``device`` at all."""
    if dtype in FP8_TYPES:
        return device.supports_fp8
    if dtype == BF16 and device.kind == "mps":
        return device.supports_bf16
    return True


def can_compute(device: DeviceInfo, dtype: torch.dtype) -> bool:
    """Whether layers can run in ``dtype`` on ``device`` at all (however slowly)."""
    if dtype in FP8_TYPES:
        return device.supports_fp8_matmul
    return can_store(device, dtype)


def computes_well(device: DeviceInfo, dtype: torch.dtype) -> bool:
    """Whether ``dtype`` is fast and correct on ``device`` (what the automatic policy uses)."""
    if dtype == FP16:
        return device.supports_fp16
    if dtype == BF16:
        return device.supports_bf16
    return dtype == FP32


class DtypePolicy:
    """Decides storage and compute dtypes; holds only the family registry it reads preferences from."""

    def __init__(self, registry: Registry | None = None) -> None:
        self._registry = registry if registry is not None else REGISTRY

    def storage_and_compute(
        self,
        role: str,
        family: str | None,
        stored_dtype: torch.dtype | str | None,
        device: DeviceInfo,
        settings: MemorySettings | None = None,
    ) -> DtypeChoice:
        if role not in ROLES:
            raise SettingsError(f"unknown model role {role!r}", fix=f"use one of: {', '.join(ROLES)}")
        stored = to_dtype(stored_dtype) if stored_dtype is not None else None
        override = (settings or MemorySettings()).override_for(role)
        compute, why_compute = self._auto_compute(role, family, stored, device)
        auto = compute
        forced_storage: torch.dtype | None = None
        if override is not None and override.compute is not None:
            compute, why_compute, forced_storage = _compute_override(
                to_dtype(override.compute), compute, why_compute, device
            )
        storage, why_storage = _auto_storage(stored, compute, device)
        if forced_storage is not None:
            storage = forced_storage
            if stored == forced_storage:
                why_storage = "as stored, which fp8 matmul multiplies directly"
            else:
                source = f" from {short_name(stored)}" if stored is not None else ""
                why_storage = f"quantized{source} when loaded, for fp8 matmul"
        if override is not None and override.storage is not None:
            storage, why_storage, compute, why_compute = _storage_override(
                to_dtype(override.storage), storage, why_storage, compute, why_compute, device, stored
            )
        what = _describe(role, family, device)
        reason = (
            f"{what}: compute {short_name(compute)} ({why_compute}); "
            f"storage {short_name(storage)} ({why_storage})"
        )
        activation = auto if compute in FP8_TYPES else None
        if activation is not None:
            reason += f"; activations run in {short_name(activation)}"
        return DtypeChoice(
            storage=storage,
            compute=compute,
            manual_cast=storage != compute,
            reason=reason,
            activation=activation,
        )

    # -- automatic compute -----------------------------------------------------------------------

    def _auto_compute(
        self, role: str, family: str | None, stored: torch.dtype | None, device: DeviceInfo
    ) -> tuple[torch.dtype, str]:
        if role == "vae":
            return _vae_compute(device)
        fam = self._registry.get(family) if family else None
        prefers = (torch_dtype_by_short(fam.default_dtype) or FP16) if fam is not None else FP16
        title = fam.title if fam is not None else (family or "this model")
        if prefers == FP32:
            return FP32, f"{title} runs in fp32"
        unsafe = family in FP16_UNSAFE
        allowed = list(dict.fromkeys(d for d in (prefers, BF16, FP16) if not (unsafe and d == FP16)))
        usable = [d for d in allowed if computes_well(device, d)]
        if stored in usable and stored != usable[0]:
            return (
                stored,
                f"stored in {short_name(stored)}, which {title} and {_dev(device)} both handle well",
            )
        if usable:
            chosen = usable[0]
            if chosen == prefers:
                return chosen, f"{title} runs best in {short_name(chosen)} and {_dev(device)} supports it"
            return (
                chosen,
                f"{_dev(device)} lacks fast {short_name(prefers)}; {title} also runs in {short_name(chosen)}",
            )
        if device.kind == "cpu":
            return FP32, "the CPU computes fp16/bf16 slowly, fp32 at full speed"
        if unsafe and device.supports_fp16:
            return FP32, f"{title} overflows in fp16 and {_dev(device)} has no fast bf16"
        why = "; ".join(device.notes) or f"{_dev(device)} has no fast fp16 or bf16"
        return FP32, why


def _vae_compute(device: DeviceInfo) -> tuple[torch.dtype, str]:
    if device.kind == "cpu":
        return FP32, "the CPU computes fp16/bf16 slowly, fp32 at full speed"
    if device.supports_bf16 and device.kind != "rocm":
        return BF16, "VAEs overflow to NaN in fp16 (SDXL's does), bf16 keeps fp32's range"
    if device.kind == "rocm" and device.supports_bf16:
        return FP32, "VAEs overflow in fp16 and bf16 convolutions are slow on AMD GPUs"
    return FP32, f"VAEs overflow to NaN in fp16 (SDXL's does) and {_dev(device)} has no fast bf16"


def _auto_storage(
    stored: torch.dtype | None, compute: torch.dtype, device: DeviceInfo
) -> tuple[torch.dtype, str]:
    if stored is None:
        return compute, "stored dtype unknown, so the compute dtype"
    s, c = short_name(stored), short_name(compute)
    if stored in FP8_TYPES:
        if device.supports_fp8:
            return stored, f"kept in {s} as stored, half of 16-bit memory; upcast to {c} per layer"
        return compute, f"{_dev(device)} cannot hold {s} tensors, so upcast to {c} when loaded"
    if stored == compute:
        return stored, "as stored"
    if not stored.is_floating_point:
        return compute, f"{s} weights converted to {c}"
    if stored.itemsize > compute.itemsize:
        return compute, f"converted from {s} when loaded, {stored.itemsize // compute.itemsize}x less memory"
    if compute == FP32 and can_store(device, stored):
        return stored, f"kept in {s} as stored, half the memory of fp32; cast to fp32 per layer"
    if not can_store(device, stored):
        return compute, f"{_dev(device)} cannot hold {s}, so converted to {c} when loaded"
    return compute, f"converted from {s} when loaded, so layers run without casts"


def _compute_override(
    wanted: torch.dtype, auto: torch.dtype, why_auto: str, device: DeviceInfo
) -> tuple[torch.dtype, str, torch.dtype | None]:
    name = short_name(wanted)
    if not can_compute(device, wanted):
        need = "fp8 matmul (NVIDIA CC 8.9+, AMD gfx950/gfx12)" if wanted in FP8_TYPES else f"{name} support"
        why = f"your {name} compute setting needs {need}, which {_dev(device)} lacks; automatic: {why_auto}"
        return auto, why, None
    why = f"your setting; automatic would be {short_name(auto)}"
    if not computes_well(device, wanted) and wanted not in FP8_TYPES:
        caveat = "; ".join(device.notes) or f"{name} is slow on {_dev(device)}"
        why += f"; note: {caveat}"
    return wanted, why, wanted if wanted in FP8_TYPES else None


def _storage_override(
    wanted: torch.dtype,
    storage: torch.dtype,
    why_storage: str,
    compute: torch.dtype,
    why_compute: str,
    device: DeviceInfo,
    stored: torch.dtype | None,
) -> tuple[torch.dtype, str, torch.dtype, str]:
    name = short_name(wanted)
    if not can_store(device, wanted):
        why = f"your {name} storage setting is impossible: {_dev(device)} cannot hold {name}; {why_storage}"
        return storage, why, compute, why_compute
    if compute in FP8_TYPES and wanted != compute:
        fallback = BF16 if computes_well(device, BF16) else FP16 if computes_well(device, FP16) else FP32
        why_compute = f"fp8 matmul needs fp8 weights and your storage setting is {name}"
        compute = fallback
    source = f" (converted from {short_name(stored)})" if stored is not None and stored != wanted else ""
    return wanted, f"your setting{source}", compute, why_compute


def _dev(device: DeviceInfo) -> str:
    if device.kind == "cpu":
        return "the CPU"
    if device.kind == "rocm":
        return f"{device.name} ({device.arch})" if device.arch else device.name
    if device.compute_capability is not None:
        return f"{device.name} ({device.capability_text})"
    return device.name


_ROLE_TITLES = MappingProxyType(
    {
        "diffusion_model": "Diffusion model",
        "text_encoder": "Text encoder",
        "vae": "VAE",
        "controlnet": "ControlNet",
    }
)


def _describe(role: str, family: str | None, device: DeviceInfo) -> str:
    part = _ROLE_TITLES.get(role, role)
    fam = f" ({family})" if family else ""
    return f"{part}{fam} on {_dev(device)}"
