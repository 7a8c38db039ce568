"""Noise, drawn exactly as ComfyUI draws it so that a seed carries over.

- The initial noise (:func:`initial_noise`) is one ``torch.randn`` of the whole latent shape from a
  CPU generator seeded with the seed, float32 (ComfyUI's ``prepare_noise``): batch item ``i`` of
  a batch of 4 is *not* the noise of a batch of 1 with the same seed. With ``batch_index``
  (latents picked from a batch), one ``[1, ...]`` draw is made per index up to the largest and the
  requested ones are taken.
- Ancestral and SDE-free stochastic samplers (euler_ancestral, lcm) use :class:`GaussianNoise`:
  a generator *on the latent's device* seeded with the same seed, one ``randn`` of the latent's
  shape per call. On a GPU this is the device's generator, so those samplers give a different
  picture on a GPU than on the CPU, as in ComfyUI.
- dpmpp_sde and dpmpp_2m_sde use :class:`BrownianNoise`: a ``torchsde.BrownianTree`` on the CPU
  over ``[smallest non-zero sigma, largest sigma]`` with the seed as its entropy; a call for
  ``(sigma, sigma_next)`` returns the Brownian increment divided by ``sqrt(|sigma_next - sigma|)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Protocol

import torch
import torchsde
from torch import Tensor

from core.errors import LoadoutError

# torchsde compares float32 query times with the tree's float64 ends and warns when a query at an
# end differs in the last float32 bit: harmless (the query is clamped), and ComfyUI draws the same.
warnings.filterwarnings(
    "ignore", message=r"Should have (ta>=t0|tb<=t1)", category=UserWarning, module="torchsde"
)

SEED_MAX = 0xFFFF_FFFF_FFFF_FFFF  # ComfyUI's KSampler accepts 0 .. 2^64 - 1


def check_seed(seed: int) -> int:
    if not 0 <= seed <= SEED_MAX:
        raise LoadoutError(
            f"the seed {seed} is out of range",
            why="seeds are integers from 0 to 18446744073709551615 (2^64 - 1), as in ComfyUI",
            fix="pick a seed in that range",
            code="bad_argument",
        )
    return seed


def _cpu_generator(seed: int) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(check_seed(seed))


def initial_noise(shape: Sequence[int], seed: int, batch_index: Sequence[int] | None = None) -> Tensor:
    """The starting noise of a KSampler run: float32, on the CPU."""
    generator = _cpu_generator(seed)
    if batch_index is None:
        return torch.randn(list(shape), dtype=torch.float32, generator=generator, device="cpu")
    if len(batch_index) != shape[0] or min(batch_index, default=0) < 0:
        raise LoadoutError(
            "the batch indices do not fit the latent",
            why=f"{len(batch_index)} non-negative indices are needed for a batch of {shape[0]}",
            fix="give one batch index per latent",
            code="bad_argument",
        )
    item = [1, *shape[1:]]
    draws = [
        torch.randn(item, dtype=torch.float32, generator=generator, device="cpu")
        for _ in range(max(batch_index) + 1)
    ]
    return torch.cat([draws[i] for i in batch_index], dim=0)


class NoiseSampler(Protocol):
    """Fresh noise of the latent's shape for a step from ``sigma`` to ``sigma_next``."""

    def __call__(self, sigma: Tensor, sigma_next: Tensor) -> Tensor: ...


class GaussianNoise:
    """Independent standard normal draws from a seeded generator on the latent's device."""

    def __init__(self, like: Tensor, seed: int) -> None:
        self._shape = like.shape
        self._dtype = like.dtype
        self._device = like.device
        self._generator = torch.Generator(device=like.device).manual_seed(check_seed(seed))

    def __call__(self, sigma: Tensor, sigma_next: Tensor) -> Tensor:
        return torch.randn(self._shape, dtype=self._dtype, device=self._device, generator=self._generator)


class BrownianNoise:
    """Normalised increments of one Brownian motion over sigma, so that steps of any size see
    consistent noise (the same seed gives related noise whatever the step count).

    The tree lives on the CPU (device-independent pictures) unless ``on_device``: then it is built
    on the latent's device, as ComfyUI's ``*_gpu`` samplers do (the same numbers on a CPU, other
    numbers on a GPU)."""

    def __init__(
        self, like: Tensor, sigma_min: Tensor, sigma_max: Tensor, seed: int, *, on_device: bool = False
    ) -> None:
        t0, t1 = torch.as_tensor(sigma_min), torch.as_tensor(sigma_max)
        self._flip = 1.0
        if not t0 < t1:
            t0, t1, self._flip = t1, t0, -1.0
        self._on_device = on_device
        w0 = torch.zeros_like(like).detach()
        if not on_device:
            t0, t1, w0 = t0.detach().cpu(), t1.detach().cpu(), w0.cpu()
        self._tree = torchsde.BrownianTree(t0, w0, t1, entropy=check_seed(seed))
        self._device, self._dtype = like.device, like.dtype

    def __call__(self, sigma: Tensor, sigma_next: Tensor) -> Tensor:
        a, b = torch.as_tensor(sigma), torch.as_tensor(sigma_next)
        direction = 1.0
        if not a < b:
            a, b, direction = b, a, -1.0
        if not self._on_device:
            a, b = a.detach().cpu().float(), b.detach().cpu().float()
        w: Tensor = self._tree(a, b)
        w = w.to(device=self._device, dtype=self._dtype) * (self._flip * direction)
        return w / (b - a).abs().sqrt()
