"""What a hires fix is asked for: the scale, the second pass's denoise and steps, and the upscaler
(a latent method, or an upscale model file). Pure data; the pass itself is core.generate.hires."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.generate.latent_upscale import LATENT_METHODS, scaled_size

#: how a picture made by an upscale model is brought to the wanted scale (ImageScaleBy's method)
MODEL_RESIZE_METHOD = "area"


@dataclass(frozen=True)
class HiresFix:
    """``steps`` None: the first pass's steps (A1111 writes ``Hires steps`` only when they differ).
    ``model`` set: decode, upscale with the model, resize to ``scale``, encode (``upscaler`` unused)."""

    scale: float = 2.0
    denoise: float = 0.5
    steps: int | None = None
    upscaler: str = "nearest-exact"
    model: Path | None = None

    def problems(self) -> list[str]:
        out = []
        if not 0.1 <= self.scale <= 8.0:
            out.append(f"the hires scale must be between 0.1 and 8, not {self.scale}")
        if not 0.0 < self.denoise <= 1.0:
            out.append(f"the hires denoise must be above 0 and at most 1, not {self.denoise}")
        if self.steps is not None and not 1 <= self.steps <= 10_000:
            out.append(f"hires steps must be between 1 and 10000, not {self.steps}")
        if self.model is None and self.upscaler not in LATENT_METHODS:
            out.append(f"hires upscaler {self.upscaler!r} is not one of " + ", ".join(LATENT_METHODS))
        return out

    def target_size(self, width: int, height: int, stride: int = 8) -> tuple[int, int]:
        """The picture's size after the fix: the latent (1/``stride`` of the picture: 8, FLUX.2's
        16) scaled and rounded as LatentUpscaleBy rounds it, times ``stride``."""
        w, h = scaled_size(width // stride, height // stride, self.scale)
        return w * stride, h * stride

    @property
    def label(self) -> str:
        """A1111's ``Hires upscaler`` value: ``Latent (bislerp)`` or the model's name."""
        return self.model.stem if self.model is not None else f"Latent ({self.upscaler})"
