"""The VRAM state: one enum from the policy that chooses it to the planner that acts on it.

Its value is the planner's name ("no_vram", "low_vram", "normal", ...); ``option`` is how the
command line and the Settings dialog spell it ("no-vram", "low-vram", ...); ``parse`` accepts
every spelling, ComfyUI's included ("NORMAL_VRAM", "lowvram", "gpu_only", "cpu", "mps").
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from core.errors import LoadoutError


class SettingsError(LoadoutError, ValueError):
    """A memory setting is out of range or names something unknown."""

    code = "invalid_setting"


class VramState(StrEnum):
    """One VRAM state from the policy to the planner (its value is the planner's name; ``option``
    is how the command line and the window spell it)."""

    DISABLED = "disabled"  # no GPU: everything on the CPU
    NO_VRAM = "no_vram"  # weights live in RAM and stream to the card per layer
    LOW_VRAM = "low_vram"  # models load partially; the rest streams from RAM
    NORMAL_VRAM = "normal"  # models load fully when they fit, partially otherwise
    HIGH_VRAM = "high_vram"  # models never leave the card
    SHARED = "shared"  # GPU and CPU share RAM (Apple silicon, iGPUs): offloading frees nothing

    @property
    def title(self) -> str:  # type: ignore[override]  # the words, not str.title()
        return _TITLES[self]

    @property
    def option(self) -> str:
        """``--vram-mode`` and Settings spelling: "no-vram", "low-vram", "normal", ..."""
        return _OPTIONS[self]

    @classmethod
    def parse(cls, text: str) -> VramState:
        """Accepts "low-vram", "lowvram", "low_vram", "low", "normal", "highvram", "cpu" ..."""
        key = text.strip().lower().replace("_", "-")
        aliases = {"cpu": "disabled", "novram": "no-vram", "none": "no-vram", "lowvram": "low-vram"}
        aliases |= {"low": "low-vram", "normal-vram": "normal", "normalvram": "normal"}
        aliases |= {"highvram": "high-vram", "high": "high-vram", "gpu-only": "high-vram", "mps": "shared"}
        key = aliases.get(key, key)
        for state in cls:
            if state.option == key:
                return state
        choices = ", ".join(s.option for s in cls)
        raise SettingsError(f"unknown VRAM state {text!r}", fix=f"use one of: {choices}")


_OPTIONS = MappingProxyType(
    {
        VramState.DISABLED: "disabled",
        VramState.NO_VRAM: "no-vram",
        VramState.LOW_VRAM: "low-vram",
        VramState.NORMAL_VRAM: "normal",
        VramState.HIGH_VRAM: "high-vram",
        VramState.SHARED: "shared",
    }
)

_TITLES = MappingProxyType(
    {
        VramState.DISABLED: "no GPU",
        VramState.NO_VRAM: "no-VRAM mode",
        VramState.LOW_VRAM: "low VRAM",
        VramState.NORMAL_VRAM: "normal VRAM",
        VramState.HIGH_VRAM: "high VRAM",
        VramState.SHARED: "shared memory",
    }
)
