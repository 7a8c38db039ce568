"""Inpainting with a noise mask: ComfyUI's KSamplerX0Inpaint around the guided denoiser.

Before every model call the part of ``x`` outside the mask is replaced by the starting latent
noised to the current sigma (``noise_scaling(sigma, noise, latent)`` with the run's own initial
noise), and after it the denoised estimate outside the mask is the starting latent itself:

    x        = x * mask + noise_scaling(sigma, noise, latent) * (1 - mask)
    denoised = model(x, sigma) * mask + latent * (1 - mask)

``mask`` is 1 where the picture is repainted (SetLatentNoiseMask's white), already at the
latent's size (:func:`latent_mask`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from core.sampling.model_sampling import ModelSampling
from core.sampling.samplers.base import ModelFn, with_uncond


def latent_mask(mask: Tensor, shape: torch.Size | tuple[int, ...]) -> Tensor:
    """A ``[H, W]`` or ``[B, H, W]`` mask (0..1) at the latent's ``[B, C, h, w]`` shape, as ComfyUI's
    ``reshape_mask`` makes it: bilinear resize, repeated over channels and the batch."""
    m = mask.reshape(-1, 1, mask.shape[-2], mask.shape[-1]).to(torch.float32)
    m = F.interpolate(m, size=(int(shape[2]), int(shape[3])), mode="bilinear")
    m = m.repeat(1, int(shape[1]), 1, 1)
    if m.shape[0] < shape[0]:
        m = m.repeat(-(-int(shape[0]) // m.shape[0]), 1, 1, 1)
    return m[: int(shape[0])]  # ComfyUI's repeat_to_batch_size: repeated, or cut to the batch


@dataclass(frozen=True)
class MaskedDenoiser:
    inner: ModelFn
    sampling: ModelSampling
    mask: Tensor
    noise: Tensor
    latent: Tensor  # the starting latent in the model's space

    def __call__(self, x: Tensor, sigma: Tensor) -> Tensor:
        return self._blend_out(self.inner(self._blend_in(x, sigma), sigma))

    def with_uncond(self, x: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor]:
        """The CFG++ path: the guided estimate is masked, the negative's is passed on as the
        inner model gave it (ComfyUI's post-CFG hook sees it before the mask)."""
        denoised, uncond = with_uncond(self.inner, self._blend_in(x, sigma), sigma)
        return self._blend_out(denoised), uncond

    def _blend_in(self, x: Tensor, sigma: Tensor) -> Tensor:
        s = sigma.reshape(sigma.shape[0], *([1] * (x.ndim - 1)))
        return x * self.mask + self.sampling.noise_scaling(s, self.noise, self.latent, False) * (
            1.0 - self.mask
        )

    def _blend_out(self, out: Tensor) -> Tensor:
        return out * self.mask + self.latent * (1.0 - self.mask)
