"""A cheap latent -> RGB map for live previews, fitted from the decoder that will decode the
picture (see :mod:`core.generate.preview`): the record every :class:`~core.archs.protocols.LatentCodec`
hands out, and the least-squares fit any codec can use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from core.finite import require_finite


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
