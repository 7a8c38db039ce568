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


@dataclass(frozen=True)
class GeneratedImage:
    path: Path
    parameters: GenerationParameters
    infotext: str  # exactly what the PNG's "parameters" chunk holds
    label: str = ""  # e.g. "style 0.7" in a LoRA strength sweep


@dataclass(frozen=True)
class GenerateResult:
    images: tuple[GeneratedImage, ...]
    seed: int
    seconds_per_step: float
    seconds: dict[str, float]  # text_encode / sample / decode
    peak_bytes: int
    events: tuple[dict[str, object], ...] = ()
    notes: tuple[str, ...] = ()  # e.g. "demo models make noise-like pictures"

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
        }
