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

Sigmas are float32, as ComfyUI builds them (``torch.FloatTensor`` of Python floats).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy
import torch
from torch import Tensor

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


SCHEDULERS: Mapping[str, Scheduler] = MappingProxyType(
    {
        "normal": normal,
        "karras": karras,
        "exponential": exponential,
        "sgm_uniform": sgm_uniform,
        "simple": simple,
        "beta": beta,
    }
)
