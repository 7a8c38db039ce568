"""Memory policy: VRAM states, the reserve kept for others, inference headroom, pinned-memory cap.

Everything here is a pure function of a device record, a size and the user's
:class:`MemorySettings`, so each rule is tested with simulated 2 GiB ... 80 GiB cards.

The reserve follows ComfyUI's (``model_management.py``): keep 400 MiB of a real card free for
other applications and the driver (600 MiB on Windows, whose desktop shares VRAM, plus 100 MiB
there on cards over 15 GiB). Activation memory is a different fact: it depends on the workload
(family, size, batch, dtype, attention kernel) and is predicted by the measured model in
``core.memory.inference``; ComfyUI's fixed 0.8 GiB minimum is not taken over (it made the manager
refuse 1-2 GiB cards that ComfyUI serves by streaming everything).

No-VRAM mode is never chosen automatically (as ComfyUI, whose ``--novram`` is the user's flag):
a small card runs in low-VRAM mode, where planning keeps resident what the card holds once the
predicted activations, the streamed modules in flight and the reserve are set aside, and streams
the rest. Streaming everything on a 2 GiB card would move every weight every step for nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from core.memory.devices import DeviceInfo
from core.memory.vram_state import SettingsError as SettingsError
from core.memory.vram_state import VramState as VramState
from core.units import GIB, MIB, card_size

DtypeRole = Literal["diffusion_model", "text_encoder", "vae", "controlnet"]
ROLES: tuple[DtypeRole, ...] = ("diffusion_model", "text_encoder", "vae", "controlnet")

#: dtype names a setting may use (storage or compute)
DTYPE_NAMES = ("fp32", "fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2")

#: below this a card runs in low-VRAM mode (no-VRAM mode only when the user asks for it)
LOW_VRAM_BELOW = 5 * GIB
#: cards this large are told that high-VRAM mode is an option (never chosen automatically)
HIGH_VRAM_HINT_FROM = 40 * GIB


_EFFECTS = MappingProxyType(
    {
        VramState.DISABLED: "everything runs on the CPU from system RAM",
        VramState.NO_VRAM: "weights stay in system RAM and move to the card layer by layer",
        VramState.LOW_VRAM: "models load partially and the rest streams from system RAM",
        VramState.NORMAL_VRAM: "models load fully when they fit",
        VramState.HIGH_VRAM: "models stay on the card and are never offloaded",
        VramState.SHARED: "the GPU shares system RAM, so offloading to RAM frees nothing",
    }
)


@dataclass(frozen=True)
class DtypeOverride:
    """The user's dtype choice for one role; None leaves that half to the automatic policy."""

    role: DtypeRole
    storage: str | None = None
    compute: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise SettingsError(f"unknown model role {self.role!r}", fix=f"use one of: {', '.join(ROLES)}")
        for kind, name in (("storage", self.storage), ("compute", self.compute)):
            if name is not None and name not in DTYPE_NAMES:
                raise SettingsError(
                    f"unknown {kind} dtype {name!r} for the {self.role.replace('_', ' ')}",
                    fix=f"use one of: {', '.join(DTYPE_NAMES)}",
                )
        if self.storage is None and self.compute is None:
            raise SettingsError(f"the dtype override for the {self.role.replace('_', ' ')} sets nothing")


@dataclass(frozen=True)
class MemorySettings:
    """What the user chose; None everywhere means "decide automatically"."""

    vram_state: VramState | None = None
    reserve_bytes: int | None = None  # kept free for other applications
    min_inference_bytes: int | None = None  # fixed headroom for activations (None: the measured model)
    pinned_memory: bool = True
    pinned_fraction: float | None = None  # cap on pinned RAM as a fraction of total RAM
    dtype_overrides: tuple[DtypeOverride, ...] = ()

    def __post_init__(self) -> None:
        for name in ("reserve_bytes", "min_inference_bytes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise SettingsError(
                    f"{name.replace('_', ' ')} must be a whole number of bytes >= 0, got {value!r}"
                )
        if self.pinned_fraction is not None and not 0.0 < self.pinned_fraction <= 0.95:
            raise SettingsError(
                f"pinned memory fraction must lie in (0, 0.95], got {self.pinned_fraction}",
                why="pinning all of RAM starves the operating system",
            )
        roles = [o.role for o in self.dtype_overrides]
        dupes = sorted({r for r in roles if roles.count(r) > 1})
        if dupes:
            raise SettingsError(f"more than one dtype override for: {', '.join(dupes)}")

    def override_for(self, role: str) -> DtypeOverride | None:
        return next((o for o in self.dtype_overrides if o.role == role), None)


@dataclass(frozen=True)
class VramDecision:
    state: VramState
    reason: str  # "24 GiB card: normal VRAM; models load fully when they fit"
    automatic: bool  # False when the user's setting decided


def automatic_vram_state(device: DeviceInfo, total: int) -> VramDecision:
    """The state the card's size and kind call for, with the sentence explaining it."""
    if device.kind == "cpu" and not device.simulated:
        return VramDecision(VramState.DISABLED, f"No GPU: {_EFFECTS[VramState.DISABLED]}", True)
    card = f"{card_size(total)} {_card_word(device)}"
    if device.shared_memory:
        state = VramState.SHARED
    elif total < LOW_VRAM_BELOW:
        state = VramState.LOW_VRAM
    else:
        state = VramState.NORMAL_VRAM
    reason = f"{card}: {state.title}; {_EFFECTS[state]}"
    if state is VramState.NORMAL_VRAM:
        reason += ", partially otherwise"
        if total >= HIGH_VRAM_HINT_FROM:
            reason += " (choose high VRAM to keep every model on the card)"
    return VramDecision(state, reason, True)


def choose_vram_state(device: DeviceInfo, total: int, settings: MemorySettings | None = None) -> VramDecision:
    """The VRAM state for ``device`` with ``total`` bytes (a probe's total, possibly limited)."""
    auto = automatic_vram_state(device, total)
    wanted = settings.vram_state if settings is not None else None
    if wanted is None or wanted is auto.state:
        return auto
    if device.kind == "cpu" and not device.simulated:
        return VramDecision(
            VramState.DISABLED,
            f"No GPU: {_EFFECTS[VramState.DISABLED]} (the {wanted.title} setting has no effect without one)",
            False,
        )
    card = f"{card_size(total)} {_card_word(device)}"
    reason = f"{card}: {wanted.title} (your setting; automatic: {auto.state.title}); {_EFFECTS[wanted]}"
    return VramDecision(wanted, reason, False)


def _card_word(device: DeviceInfo) -> str:
    if device.kind == "mps":
        return "Apple GPU"
    if device.is_integrated:
        return "integrated GPU"
    return "card"


def reserve_bytes(
    device: DeviceInfo, total: int, platform: str, settings: MemorySettings | None = None
) -> int:
    """Bytes kept free for other applications (the desktop, a browser) and the driver on ``device``.

    ``platform`` is ``sys.platform`` ("win32", "linux", "darwin"). The user's setting wins.
    A card simulated on the CPU keeps nothing back: the reserve stands for VRAM that other
    programs and the driver's context hold on a real card, and on a simulated one nothing else
    shares the budget the user set (the RAM under it is the operating system's business).
    """
    if settings is not None and settings.reserve_bytes is not None:
        return settings.reserve_bytes
    if device.kind == "cpu":
        return 0  # no GPU, or a simulated card: nothing else uses that budget
    if platform.startswith("win"):
        extra = 100 * MIB if total > 15 * GIB else 0  # more on 16 GB+ cards under WDDM
        return 600 * MIB + extra
    return 400 * MIB


def minimum_inference_bytes(reserve: int, settings: MemorySettings | None = None) -> int:
    """The least kept free while a model runs, whatever its workload: the user's fixed setting,
    or else only the reserve. Activations are added per workload (``memory_required``, predicted
    by ``core.memory.inference``), so a small image on a small card is not refused for a big one."""
    if settings is not None and settings.min_inference_bytes is not None:
        return settings.min_inference_bytes
    return reserve


def pinned_memory_cap(ram_total: int, platform: str, settings: MemorySettings | None = None) -> int:
    """Most RAM that may be pinned (page-locked) for fast transfers: 95%, 45% on Windows; 0 if off."""
    settings = settings or MemorySettings()
    if not settings.pinned_memory:
        return 0
    fraction = settings.pinned_fraction
    if fraction is None:
        fraction = 0.45 if platform.startswith("win") else 0.95
    return int(ram_total * fraction)
