"""Classifier-free guidance with the negative and positive prompt in one forward pass.

ComfyUI's ``sampling_function``: with a CFG scale of 1 (``math.isclose``) the negative prompt is
not evaluated at all; otherwise both run as one batch, negative items first, and
``denoised = uncond + (cond - uncond) * scale``. The CFG++ samplers also take the negative's own
estimate (:meth:`CfgDenoiser.with_uncond`), for which the negative runs even at CFG 1.
Conditionings that cannot be concatenated (see :mod:`core.sampling.conditioning`) run as two
passes with the same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from core.sampling.conditioning import Conditioning, can_concat, concat
from core.sampling.denoiser import Denoiser


@dataclass(frozen=True)
class CfgDenoiser:
    """What a sampler calls: ``(x, sigma [B]) -> guided denoised latent``."""

    denoiser: Denoiser
    positive: Conditioning
    negative: Conditioning | None
    scale: float
    #: replaces ``uncond + (cond - uncond) * scale`` (a CFG variant's feature; None: plain CFG)
    guidance: Callable[[Tensor, Tensor, float], Tensor] | None = None

    @property
    def uses_negative(self) -> bool:
        return self.negative is not None and not math.isclose(self.scale, 1.0)

    def __call__(self, x: Tensor, sigma: Tensor) -> Tensor:
        if self.negative is None or not self.uses_negative:
            return self.denoiser(x, sigma, self.positive.repeat_to(x.shape[0]))
        return self.with_uncond(x, sigma)[0]

    def with_uncond(self, x: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor]:
        """``(guided, uncond)`` with the negative evaluated whatever the scale (the CFG++
        samplers' path; at CFG 1 the guided result is ``uncond + (cond - uncond)``, as ComfyUI
        computes it). Without a negative prompt the positive's estimate is both."""
        batch = x.shape[0]
        positive = self.positive.repeat_to(batch)
        if self.negative is None:
            cond = self.denoiser(x, sigma, positive)
            return cond, cond
        negative = self.negative.repeat_to(batch)
        if can_concat(negative, positive):
            both = self.denoiser(torch.cat([x, x]), torch.cat([sigma, sigma]), concat([negative, positive]))
            uncond, cond = both.chunk(2)
        else:
            uncond = self.denoiser(x, sigma, negative)
            cond = self.denoiser(x, sigma, positive)
        if self.guidance is not None:
            return self.guidance(uncond, cond, self.scale), uncond
        return uncond + (cond - uncond) * self.scale, uncond
