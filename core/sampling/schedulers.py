"""Schedulers: pure functions ``(model sampling, steps) -> sigmas``, each ending with 0.

The names and formulas are ComfyUI's KSampler schedulers (``comfy/samplers.py``,
``comfy/k_diffusion/sampling.py``):

- ``normal``: timesteps evenly spaced from the largest to the smallest tabulated sigma's timestep
  (``steps`` points, both ends included), mapped back to sigmas, then 0.
- ``sgm_uniform``: the same with ``steps + 1`` points whose last (the smallest sigma) is dropped.
- ``karras``: Karras et al. 2022, ``rho = 7`` between the table's smallest and largest sigma.
- ``exponential``: log-sigma evenly spaced between the same ends.
- ``simple``: every ``len(table) / steps``-th tabulated sigma from the top.
- ``beta``: timesteps at the quantiles of a Beta(0.6, 0.6) distribution (arXiv 2407.12173),
  rounded to table indices; a repeated index is dropped, so a schedule may be shorter than
  ``steps`` (ComfyUI does the same).
- ``ddim_uniform``: every ``len(table) // steps``-th tabulated sigma from the bottom (index 1
  up), highest first, then 0 (the steps need not end exactly at the table's top).
- ``linear_quadratic``: Movie Gen's schedule (arXiv 2410.13720): the first half of the steps
  linear down to 0.975 of the largest sigma, the rest quadratic to 0.
- ``kl_optimal``: ``tan`` of ``atan(sigma)`` evenly spaced (arXiv 2404.14507); with 1 step it is
  the largest sigma then 0 (ComfyUI divides 0 by 0 there and gives NaN sigmas).
- ``ays_sd1``, ``ays_sdxl``, ``gits``: published sigma sets (:mod:`core.sampling.sigma_sets`).
- ``flux2``: ComfyUI's Flux2Scheduler, which needs the picture's size too
  (:mod:`core.sampling.sized_schedules`; called without one it is refused in words).

Sigmas are float32, as ComfyUI builds them (``torch.FloatTensor`` of Python floats).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy
import torch
from torch import Tensor

from core.errors import LoadoutError
from core.sampling import sigma_sets
from core.sampling.model_sampling import ModelSampling

Scheduler = Callable[[ModelSampling, int], Tensor]


def _floats(values: list[float]) -> Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _timestep_spaced(ms: ModelSampling, steps: int, *, sgm: bool) -> Tensor:
    start = float(ms.timestep(ms.sigma_max))
    end = float(ms.timestep(ms.sigma_min))
    append_zero = True
    if sgm:
        timesteps = torch.linspace(start, end, steps + 1)[:-1]
    else:
        # A table whose smallest sigma is 0 already ends at 0: one more point instead of a 0.
        if math.isclose(float(ms.sigma(torch.tensor(end))), 0.0, abs_tol=1e-5):
            steps += 1
            append_zero = False
        timesteps = torch.linspace(start, end, steps)
    sigmas = [float(ms.sigma(t)) for t in timesteps]
    return _floats([*sigmas, 0.0] if append_zero else sigmas)


def normal(ms: ModelSampling, steps: int) -> Tensor:
    return _timestep_spaced(ms, steps, sgm=False)


def sgm_uniform(ms: ModelSampling, steps: int) -> Tensor:
    return _timestep_spaced(ms, steps, sgm=True)


def karras(ms: ModelSampling, steps: int, rho: float = 7.0) -> Tensor:
    sigma_min, sigma_max = float(ms.sigma_min), float(ms.sigma_max)
    ramp = torch.linspace(0, 1, steps)
    min_inv_rho = sigma_min ** (1 / rho)
    max_inv_rho = sigma_max ** (1 / rho)
    sigmas = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho
    return torch.cat([sigmas, sigmas.new_zeros([1])])


def exponential(ms: ModelSampling, steps: int) -> Tensor:
    sigma_min, sigma_max = float(ms.sigma_min), float(ms.sigma_max)
    sigmas = torch.linspace(math.log(sigma_max), math.log(sigma_min), steps).exp()
    return torch.cat([sigmas, sigmas.new_zeros([1])])


def simple(ms: ModelSampling, steps: int) -> Tensor:
    table = ms.sigmas
    stride = len(table) / steps
    return _floats([float(table[-(1 + int(i * stride))]) for i in range(steps)] + [0.0])


def beta(ms: ModelSampling, steps: int, alpha: float = 0.6, beta_: float = 0.6) -> Tensor:
    last_index = len(ms.sigmas) - 1
    quantiles = 1 - numpy.linspace(0, 1, steps, endpoint=False)
    import scipy.stats  # 2 s to import: only when the beta scheduler is used

    indices = numpy.rint(scipy.stats.beta.ppf(quantiles, alpha, beta_) * last_index)
    sigmas: list[float] = []
    previous = -1.0
    for index in indices:
        if index != previous:
            sigmas.append(float(ms.sigmas[int(index)]))
        previous = float(index)
    return _floats([*sigmas, 0.0])


def ddim_uniform(ms: ModelSampling, steps: int) -> Tensor:
    table = ms.sigmas
    sigmas: list[float] = [0.0]
    if math.isclose(float(table[1]), 0.0, abs_tol=1e-5):
        steps, sigmas = steps + 1, []
    stride = max(len(table) // steps, 1)
    sigmas += [float(table[i]) for i in range(1, len(table), stride)]
    return _floats(sigmas[::-1])


def linear_quadratic(ms: ModelSampling, steps: int, threshold_noise: float = 0.025) -> Tensor:
    if steps == 1:
        fractions = [1.0, 0.0]
    else:
        linear_steps = steps // 2
        linear = [i * threshold_noise / linear_steps for i in range(linear_steps)]
        step_diff = linear_steps - threshold_noise * steps
        quadratic_steps = steps - linear_steps
        a = step_diff / (linear_steps * quadratic_steps**2)
        b = threshold_noise / linear_steps - 2 * step_diff / (quadratic_steps**2)
        c = a * (linear_steps**2)
        quadratic = [a * (i**2) + b * i + c for i in range(linear_steps, steps)]
        fractions = [1.0 - v for v in [*linear, *quadratic, 1.0]]
    return _floats(fractions) * ms.sigma_max.cpu()


def kl_optimal(ms: ModelSampling, steps: int) -> Tensor:
    ramp = torch.arange(steps, dtype=torch.float32)
    if steps > 1:
        ramp = ramp / (steps - 1)
    sigmas = ramp.new_zeros(steps + 1)
    lo, hi = math.atan(float(ms.sigma_min)), math.atan(float(ms.sigma_max))
    sigmas[:-1] = (ramp * lo + (1 - ramp) * hi).tan()
    return sigmas


def _needs_size(ms: ModelSampling, steps: int) -> Tensor:
    raise LoadoutError(
        "the flux2 schedule needs the picture's size",
        why="its shift is computed from the picture's size and the step count",
        fix="Choose another scheduler for this run",
        code="bad_argument",
    )


SCHEDULERS: Mapping[str, Scheduler] = MappingProxyType(
    {
        "normal": normal,
        "karras": karras,
        "exponential": exponential,
        "sgm_uniform": sgm_uniform,
        "simple": simple,
        "ddim_uniform": ddim_uniform,
        "beta": beta,
        "linear_quadratic": linear_quadratic,
        "kl_optimal": kl_optimal,
        "ays_sd1": sigma_sets.ays_sd1,
        "ays_sdxl": sigma_sets.ays_sdxl,
        "gits": sigma_sets.gits_scheduler,
        "flux2": _needs_size,
    }
)

#: ComfyUI's KSampler scheduler names (its ``SCHEDULER_NAMES``); the rest of ours are extras.
COMFY_SCHEDULERS = (
    "simple",
    "sgm_uniform",
    "karras",
    "exponential",
    "ddim_uniform",
    "beta",
    "normal",
    "linear_quadratic",
    "kl_optimal",
)
