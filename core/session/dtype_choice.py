"""The diffusion model's dtype decision at load, where the user's settings ask for a compute dtype
(fp8 matmul: Settings > Memory, or ``--dtype fp8_e4m3fn``).

The dtype policy (``core.memory.dtypes``) decides from the file's stored dtype and the device the
placement computes on; when it decides fp8, the loader builds the network from ``fp8_matmul_ops``
(``LoadOptions.fp8_matmul``) and generation runs the latent and the conditioning in the choice's
``activation_dtype`` (never fp8). The reason is logged as a ``dtype`` event beside the memory
events, so the window's event list, ``loadout run``'s events and ``generate``'s notes show it.
Without such a setting nothing is decided here and loading is what it always was.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from core.detect.types import Detection
from core.memory.devices import DeviceInfo, cpu_device
from core.memory.dtypes import SETTING_DTYPES, DtypeChoice, DtypePolicy, short_name
from core.memory.policy import DtypeOverride, MemorySettings
from core.ops.fp8 import is_fp8
from core.session.placement import Placement


def decision_device(placement: Placement) -> DeviceInfo:
    """The device dtype decisions are made for: the placement's accelerator, else the CPU."""
    return placement.accelerator or placement.cpu or cpu_device(0)


def asks_for_compute(settings: MemorySettings) -> bool:
    """Whether the settings choose the diffusion model's compute dtype (else nothing is decided)."""
    override = settings.override_for("diffusion_model")
    return override is not None and override.compute is not None


def diffusion_choice(placement: Placement, detection: Detection) -> DtypeChoice | None:
    """The policy's choice for the diffusion model of a file, where the settings ask for a compute
    dtype; None otherwise (or when the file has no diffusion model)."""
    settings = placement.config.settings
    comp = next((c for c in detection.components if c.role == "diffusion_model"), None)
    if comp is None or not asks_for_compute(settings):
        return None
    device = decision_device(placement)
    policy = DtypePolicy()
    if comp.dtype in SETTING_DTYPES:
        return policy.storage_and_compute("diffusion_model", comp.family, comp.dtype, device, settings)
    # GGUF blocks (Q4_K...) or a mix: the layers dequantize per forward, nothing to multiply in fp8
    kept = tuple(
        o if o.role != "diffusion_model" else replace(o, compute=None)
        for o in settings.dtype_overrides
        if o.role != "diffusion_model" or o.storage is not None
    )
    plain = replace(settings, dtype_overrides=kept)
    auto = policy.storage_and_compute("diffusion_model", comp.family, None, device, plain)
    why = (
        f"your compute setting needs plain weights and these are {comp.dtype}, dequantized per layer instead"
    )
    return replace(auto, reason=f"{auto.reason}; {why}")


def compute_override(
    dtype: torch.dtype | None, settings: MemorySettings | None = None
) -> tuple[MemorySettings, torch.dtype | None]:
    """The command line's ``--dtype`` for a run or a generation: ``fp8_e4m3fn`` becomes the
    diffusion model's compute override (fp8 matmul, decided at load, activations in 16 bits) and
    no fixed compute dtype; any other dtype stays the compute dtype, the settings unchanged."""
    base = settings or MemorySettings()
    if dtype is None or not is_fp8(dtype):
        return base, dtype
    others = tuple(o for o in base.dtype_overrides if o.role != "diffusion_model")
    fp8 = DtypeOverride("diffusion_model", compute=short_name(dtype))
    return replace(base, dtype_overrides=(*others, fp8)), None
