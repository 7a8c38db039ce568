"""What a generation reports while it runs and when it ends (frozen values, safe to hand across threads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from core.generate.parameters import GenerationParameters

Phase = Literal["load", "text_encode", "sample", "upscale", "decode", "save"]


@dataclass(frozen=True)
class GenerateProgress:
    phase: Phase
    step: int  # steps done in this phase
    steps: int  # steps in this phase (0: unknown)
    message: str = ""
    preview: np.ndarray | None = field(default=None, compare=False)  # (h, w, 3) uint8 while sampling
    image: int = 0  # which picture of a sweep/grid (0 for a plain batch)
    images: int = 1


ImageRole = Literal["picture", "grid", "cell"]


@dataclass(frozen=True)
class GeneratedImage:
    path: Path
    parameters: GenerationParameters
    infotext: str  # exactly what the PNG's "parameters" chunk holds
    label: str = ""  # e.g. "style 0.7" in a LoRA strength sweep
    #: what it is: a picture, a sweep's grid picture, or one of the pictures the grid shows
    role: ImageRole = "picture"


@dataclass(frozen=True)
class LoraMatch:
    """How one LoRA of the stack mapped onto the loaded model (the window's LoRA card shows the same)."""

    path: Path
    modules: int
    matched: int
    unmatched: int
    shape_mismatches: int

    @property
    def partial(self) -> bool:
        return bool(self.unmatched or self.shape_mismatches)

    def note(self) -> str:
        missed = self.unmatched + self.shape_mismatches
        return (
            f"LoRA {self.path.name}: {missed} of its {self.modules} modules fit nothing in this model and "
            f"were not applied ({self.matched} applied); strict LoRA matching refuses such a LoRA"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "path": str(self.path), "modules": self.modules, "matched": self.matched,
            "unmatched": self.unmatched, "shape_mismatches": self.shape_mismatches,
        }  # fmt: skip


@dataclass(frozen=True)
class GenerateResult:
    images: tuple[GeneratedImage, ...]
    seed: int
    seconds_per_step: float
    seconds: dict[str, float]  # text_encode / sample / decode
    peak_bytes: int
    events: tuple[dict[str, object], ...] = ()
    notes: tuple[str, ...] = ()  # e.g. "demo models make noise-like pictures"
    loras: tuple[LoraMatch, ...] = ()  # how each LoRA of the stack matched the model

    def to_json(self) -> dict[str, object]:
        """``loadout generate --json`` (the contract in docs/cli.md)."""
        return {
            "images": [str(i.path) for i in self.images],
            "seed": self.seed,
            "seconds_per_step": round(self.seconds_per_step, 4),
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "peak_bytes": self.peak_bytes,
            "events": list(self.events),
            "notes": list(self.notes),
            "loras": [m.to_json() for m in self.loras],
        }
