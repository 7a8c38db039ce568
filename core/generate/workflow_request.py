"""What the workflows beside text-to-image ask for: ControlNets (ComfyUI's ControlNetApplyAdvanced),
an inpainting mask (SetLatentNoiseMask / InpaintModelConditioning) and the SDXL refiner hand-off
(two KSamplerAdvanced nodes). Plain values with their checks; the engine is in
``core.generate.controlnet``, ``inpaint`` and ``refiner``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from core.errors import LoadoutError


def _bad(what: str, why: str, fix: str) -> LoadoutError:
    return LoadoutError(what, why=why, fix=fix, code="bad_argument")


@dataclass(frozen=True)
class ControlNetUse:
    """One ControlNet: its file, the hint picture, strength and the part of the schedule it acts on
    (ComfyUI's start/end percent: 0 is the first, noisiest step)."""

    path: Path
    hint: Path
    strength: float = 1.0
    start: float = 0.0
    end: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.strength) or not 0.0 <= self.strength <= 10.0:
            raise _bad(
                f"ControlNet strength {self.strength} is out of range",
                "ComfyUI's ControlNetApplyAdvanced takes 0 to 10",
                "Give a strength such as 1 (0 switches it off)",
            )
        if not (0.0 <= self.start <= 1.0 and 0.0 <= self.end <= 1.0):
            raise _bad(
                f"ControlNet start/end {self.start}:{self.end} are not percents between 0 and 1",
                "they say where in the schedule the ControlNet acts (0 = first step, 1 = last)",
                "Give START:END such as 0:1 or 0:0.6",
            )
        if self.start > self.end:
            raise _bad(
                f"ControlNet start {self.start} is after its end {self.end}",
                "a ControlNet acts from its start percent to its end percent",
                "Give a start at or before the end",
            )

    @classmethod
    def parse(cls, text: str) -> ControlNetUse:
        """``FILE:HINT[:STRENGTH[:START:END]]`` (the command line's ``--controlnet``). Windows drive
        letters (``C:\\...``) stay part of the paths."""
        parts = _split_paths(text)
        if len(parts) not in (2, 3, 5):
            raise _bad(
                f"--controlnet {text!r} is not FILE:HINT[:STRENGTH[:START:END]]",
                f"it has {len(parts)} parts",
                "Give e.g. --controlnet canny.safetensors:edges.png:0.8:0:1",
            )
        try:
            nums = [float(v) for v in parts[2:]]
        except ValueError:
            raise _bad(
                f"--controlnet {text!r}: strength, start and end must be numbers",
                f"got {':'.join(parts[2:])!r}",
                "Give e.g. canny.safetensors:edges.png:0.8:0:1",
            ) from None
        strength = nums[0] if nums else 1.0
        start, end = (nums[1], nums[2]) if len(nums) == 3 else (0.0, 1.0)
        return cls(Path(parts[0]), Path(parts[1]), strength, start, end)


def _split_paths(text: str) -> list[str]:
    raw = text.split(":")
    out: list[str] = []
    for piece in raw:
        # "C" then "\\x.png": a drive letter belongs to the next piece
        if out and len(out[-1]) == 1 and out[-1].isalpha() and piece.startswith(("\\", "/")):
            out[-1] = f"{out[-1]}:{piece}"
        else:
            out.append(piece)
    return out


@dataclass(frozen=True)
class RefinerUse:
    """The SDXL refiner and the fraction of the steps the base model runs (A1111's "switch at")."""

    path: Path
    switch: float = 0.8

    def __post_init__(self) -> None:
        if not math.isfinite(self.switch) or not 0.0 < self.switch < 1.0:
            raise _bad(
                f"refiner switch {self.switch} is not between 0 and 1",
                "it is the fraction of the steps the base model runs before the refiner takes over",
                "Give e.g. --refiner-switch 0.8",
            )

    def switch_step(self, steps: int) -> int:
        """The step the refiner starts at: ``round(steps * switch)`` clamped to 1..steps-1 (so both
        models run at least one step)."""
        return min(max(round(steps * self.switch), 1), max(steps - 1, 1))
