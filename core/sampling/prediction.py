"""What a diffusion network predicts, and how a latent is scaled in and out of it.

Three parameterisations cover the families Loadout runs (the facts are ComfyUI's
``comfy/model_sampling.py``; the code is ours):

- :class:`EpsPrediction` (SD1, SD2-base, SDXL): the network predicts the added noise. The input
  is divided by ``sqrt(sigma^2 + 1)`` and ``denoised = x - out * sigma``.
- :class:`VPrediction` (SD2-768-v, v-prediction SDXL finetunes): the network predicts
  ``v``; ``denoised = x / (sigma^2 + 1) - out * sigma / sqrt(sigma^2 + 1)``.
- :class:`FlowPrediction` (SD3, Flux, Chroma): rectified flow, ``x_sigma = (1 - sigma) x0 + sigma
  noise``; the input is unscaled and ``denoised = x - out * sigma``.

Each also says how the initial noise is mixed with the starting latent (``noise_scaling``) and how
the final latent is unmixed (``inverse_noise_scaling``). ``sigma`` is a 0-d tensor (one sigma for
the batch) or a ``[B]`` tensor (one per sample), broadcast over the latent's other dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor


def broadcast_sigma(sigma: Tensor, ndim: int) -> Tensor:
    """A 1-element sigma becomes a scalar, a ``[B]`` sigma becomes ``[B, 1, ...]``."""
    if sigma.numel() == 1:
        return sigma.reshape(())
    return sigma.reshape(sigma.shape[:1] + (1,) * (ndim - 1))


class Prediction(Protocol):
    """The network's output parameterisation (see the module docstring)."""

    @property
    def is_flow(self) -> bool: ...

    def calculate_input(self, sigma: Tensor, x: Tensor) -> Tensor: ...

    def calculate_denoised(self, sigma: Tensor, model_output: Tensor, x: Tensor) -> Tensor: ...

    def noise_scaling(self, sigma: Tensor, noise: Tensor, latent: Tensor, max_denoise: bool) -> Tensor: ...

    def inverse_noise_scaling(self, sigma: Tensor, latent: Tensor) -> Tensor: ...


@dataclass(frozen=True)
class EpsPrediction:
    """Noise prediction on a variance-exploding sigma scale (``x = x0 + sigma * noise``)."""

    sigma_data: float = 1.0

    @property
    def is_flow(self) -> bool:
        return False

    def calculate_input(self, sigma: Tensor, x: Tensor) -> Tensor:
        s = broadcast_sigma(sigma, x.ndim)
        return x / (s**2 + self.sigma_data**2) ** 0.5

    def calculate_denoised(self, sigma: Tensor, model_output: Tensor, x: Tensor) -> Tensor:
        s = broadcast_sigma(sigma, model_output.ndim)
        return x - model_output * s

    def noise_scaling(self, sigma: Tensor, noise: Tensor, latent: Tensor, max_denoise: bool) -> Tensor:
        # A full denoise starts from noise of variance 1 + sigma_max^2 (the forward process's
        # marginal), a partial one adds sigma-scaled noise to the image latent.
        s = broadcast_sigma(sigma, noise.ndim)
        scaled = noise * torch.sqrt(1.0 + s**2.0) if max_denoise else noise * s
        return scaled + latent

    def inverse_noise_scaling(self, sigma: Tensor, latent: Tensor) -> Tensor:
        return latent


@dataclass(frozen=True)
class VPrediction(EpsPrediction):
    """v-prediction; inputs and noise are scaled as for :class:`EpsPrediction`."""

    def calculate_denoised(self, sigma: Tensor, model_output: Tensor, x: Tensor) -> Tensor:
        s = broadcast_sigma(sigma, model_output.ndim)
        sd2 = self.sigma_data**2
        return x * sd2 / (s**2 + sd2) - model_output * s * self.sigma_data / (s**2 + sd2) ** 0.5


@dataclass(frozen=True)
class FlowPrediction:
    """Rectified flow: the network predicts the velocity ``noise - x0``."""

    @property
    def is_flow(self) -> bool:
        return True

    def calculate_input(self, sigma: Tensor, x: Tensor) -> Tensor:
        return x

    def calculate_denoised(self, sigma: Tensor, model_output: Tensor, x: Tensor) -> Tensor:
        s = broadcast_sigma(sigma, model_output.ndim)
        return x - model_output * s

    def noise_scaling(self, sigma: Tensor, noise: Tensor, latent: Tensor, max_denoise: bool) -> Tensor:
        s = broadcast_sigma(sigma, noise.ndim)
        return s * noise + (1.0 - s) * latent

    def inverse_noise_scaling(self, sigma: Tensor, latent: Tensor) -> Tensor:
        s = broadcast_sigma(sigma, latent.ndim)
        return latent / (1.0 - s)
