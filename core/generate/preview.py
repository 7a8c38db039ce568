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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from core.generate.finite import require_finite
from core.models.vae import AutoencoderKL


class Previewer(Protocol):
    """What the sampler's steps are shown with: a model-space latent -> an RGB picture."""

    def rgb(self, latent: torch.Tensor) -> np.ndarray: ...


@dataclass(frozen=True)
class LatentPreview:
    weight: torch.Tensor  # (C, 3)
    bias: torch.Tensor  # (3,)

    def rgb(self, latent: torch.Tensor) -> np.ndarray:
        """The first picture of a (B, C, h, w) latent as (h, w, 3) uint8."""
        z = latent[0].detach().to("cpu", torch.float32)
        if z.shape[0] != self.weight.shape[0]:
            raise ValueError(f"preview made for {self.weight.shape[0]} channels, latent has {z.shape[0]}")
        pix = torch.einsum("chw,cr->hwr", z, self.weight) + self.bias
        out: np.ndarray = ((pix.clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8).numpy()
        return out


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


def fit_linear_preview(
    decode: Callable[[torch.Tensor], torch.Tensor],
    channels: int,
    downscale: int,
    *,
    samples: int = 4,
    size: int = 8,
    seed: int = 0,
) -> LatentPreview:
    """Least-squares latent -> RGB map of any ``decode`` (latent (N, C, s, s) -> pixels (N, 3, f*s, f*s))."""
    g = torch.Generator().manual_seed(seed)
    # smooth latents: random values on a coarse grid, upsampled (real latents are mostly smooth)
    coarse = torch.randn(samples, channels, size // 2, size // 2, generator=g)
    z = F.interpolate(coarse, size=(size, size), mode="bilinear", align_corners=False)
    z = z + 0.25 * torch.randn(z.shape, generator=g)
    target = F.avg_pool2d(decode(z), downscale)  # (N, 3, size, size)
    require_finite("VAE", target)  # a non-finite decoder: said now, not as lstsq's internal assert
    x = z.permute(0, 2, 3, 1).reshape(-1, channels).double()
    y = target.permute(0, 2, 3, 1).reshape(-1, 3).double()
    design = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)
    solution = torch.linalg.lstsq(design, y).solution  # (C + 1, 3)
    return LatentPreview(solution[:channels].float(), solution[channels].float())
