"""How a family's VAE latents are scaled before the diffusion model sees them.

``process_in`` maps a VAE latent into the model's space (``(z - shift) * scale``), ``process_out``
maps back. Facts from ComfyUI's ``comfy/latent_formats.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from core.errors import LoadoutError


@dataclass(frozen=True)
class LatentFormat:
    channels: int
    scale: float
    shift: float = 0.0

    def process_in(self, latent: Tensor) -> Tensor:
        return (latent - self.shift) * self.scale

    def process_out(self, latent: Tensor) -> Tensor:
        return latent / self.scale + self.shift


SD15 = LatentFormat(channels=4, scale=0.18215)
SDXL = LatentFormat(channels=4, scale=0.13025)
SD3 = LatentFormat(channels=16, scale=1.5305, shift=0.0609)
FLUX = LatentFormat(channels=16, scale=0.3611, shift=0.1159)

_BY_FAMILY = {
    "sd1": SD15,
    "sd2": SD15,
    "sdxl": SDXL,
    "sdxl-refiner": SDXL,
    "ssd-1b": SDXL,
    "segmind-vega": SDXL,
    "sd3": SD3,
    "sd3.5-medium": SD3,
    "sd3.5-large": SD3,
    "flux-dev": FLUX,
    "flux-schnell": FLUX,
    "flux-fill": FLUX,
    "chroma": FLUX,
}


def latent_format_for(family: str) -> LatentFormat:
    fmt = _BY_FAMILY.get(family)
    if fmt is None:
        raise LoadoutError(
            f"no latent format is known for the family {family!r}",
            why="the sampler needs the scale between the VAE's latents and the model's",
            fix="use a model of a supported family (SD1, SD2, SDXL, SD3, Flux, Chroma)",
            code="unsupported_family",
        )
    return fmt
