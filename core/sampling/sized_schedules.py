"""Schedules that depend on the picture's size as well as the step count.

- ``flux2``: ComfyUI's ``Flux2Scheduler`` node (what its FLUX.2 templates sample with) and
  diffusers' ``Flux2Pipeline`` / ``Flux2KleinPipeline``: BFL's empirical shift ``mu`` from the
  picture's token count (``width * height / 16²``, rounded) and the step count — a line between
  its 10-step and 200-step fits below 4,300 tokens, the 200-step fit above — applied as the
  exponential time shift ``e^mu / (e^mu + 1/t - 1)`` to ``t`` evenly spaced from 1 to 0 (``steps +
  1`` points: the last is 0). The model's own shift is not used.

ComfyUI's node gives its sigmas to a custom sampler, where no denoise applies; as a KSampler
scheduler in Loadout a partial denoise takes the last sigmas of ``steps / denoise`` steps' schedule,
as for every scheduler (:mod:`core.sampling.sigmas`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def empirical_mu(tokens: int, steps: int) -> float:
    a1, b1 = 8.73809524e-05, 1.89833333  # BFL's fit for 10 steps
    a2, b2 = 0.00016927, 0.45666666  # ... and for 200 steps
    if tokens > 4300:
        return a2 * tokens + b2
    at_200 = a2 * tokens + b2
    at_10 = a1 * tokens + b1
    slope = (at_200 - at_10) / 190.0
    return slope * steps + (at_200 - 200.0 * slope)


def flux2(steps: int, width: int, height: int) -> Tensor:
    """ComfyUI's ``Flux2Scheduler(steps, width, height)`` sigmas, float32, ending with 0."""
    mu = empirical_mu(round(width * height / (16 * 16)), steps)
    t = torch.linspace(1, 0, steps + 1)
    shifted = math.exp(mu) / (math.exp(mu) + (1 / t - 1))  # 1/0 = inf at the end: exactly 0
    return shifted.to(torch.float32)


#: name -> (steps, width, height) -> sigmas
SIZED = {"flux2": flux2}

__all__ = ["SIZED", "empirical_mu", "flux2"]
