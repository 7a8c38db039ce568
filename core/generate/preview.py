"""Live previews while sampling: a cheap linear map from latent channels to RGB.

Each step's denoised latent is shown as a picture without running the VAE. The map (a C x 3 matrix
and a bias) is not a table copied from elsewhere: it is *fitted from the VAE that will decode the
picture*, once per VAE, by least squares between smooth random latents and their decoded pixels
averaged over each 8x8 block. Any family's VAE (4 or 16 channels, a fine-tuned VAE, the demo's tiny
one) gets a map that matches it. Fitting decodes a few 64x64 pictures: a fraction of a second on a
CPU, done before sampling starts. (How well a linear map can show a VAE's pictures depends on
the VAE: for the real SD/SDXL/Flux VAEs the colours and layout are recognisable; for the demo's
random tiny VAE nothing is.)
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from core.archs.preview import LatentPreview, fit_linear_preview
from core.models.vae import AutoencoderKL


class Previewer(Protocol):
    """What the sampler's steps are shown with: a model-space latent -> an RGB picture."""

    def rgb(self, latent: torch.Tensor) -> np.ndarray: ...


def fit_latent_preview(
    vae: AutoencoderKL, *, samples: int = 4, size: int = 8, seed: int = 0
) -> LatentPreview:
    """Fit the latent -> RGB map of ``vae`` (see the module docstring)."""
    param = next(vae.parameters(), None)
    device = param.device if param is not None and param.device.type != "meta" else torch.device("cpu")

    def decode(z: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return vae.decode(z.to(device)).to("cpu", torch.float32)

    return fit_linear_preview(
        decode, vae.config.latent_channels, vae.config.downscale, samples=samples, size=size, seed=seed
    )


__all__ = ["LatentPreview", "Previewer", "fit_latent_preview", "fit_linear_preview"]
