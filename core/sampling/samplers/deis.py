"""DEIS "tAB" coefficients (Zhang & Chen 2023, arXiv 2204.13902), as ComfyUI computes them.

The sigmas are mapped to the time of a variance-preserving SDE whose linear beta schedule is fitted
to EDM's default range (sigma 0.002..80, epsilon 1e-3), whatever the model; the coefficient of
each earlier derivative is the integral, over the step, of ``-1/2 d log(alpha)/dt /
sqrt(alpha (1 - alpha))`` times that point's Lagrange basis polynomial. The integral is the same
10,000-point sum ComfyUI takes (a left sum with ``dt = (t_next - t) / N`` over ``linspace`` points,
float32), so the coefficients agree with its numbers, not only with the exact integral.
"""

from __future__ import annotations

import torch
from torch import Tensor

_SIGMA_MIN, _SIGMA_MAX, _EPSILON = 0.002, 80.0, 1e-3
_POINTS = 10_000


def _vp_times(sigmas: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(t of each sigma, beta_0, beta_1)`` of the fitted VP schedule (float32)."""
    log_min = torch.tensor(_SIGMA_MIN) ** 2 + 1
    log_max = torch.tensor(_SIGMA_MAX) ** 2 + 1
    beta_d = 2 * (log_min.log() / _EPSILON - log_max.log()) / (_EPSILON - 1)
    beta_min = log_max.log() - 0.5 * beta_d
    sig = sigmas.detach().cpu().float()
    times = ((beta_min**2 + 2 * beta_d * (sig**2 + 1).log()).sqrt() - beta_min) / beta_d
    return times, beta_min, beta_d + beta_min


def _integrand(beta_0: Tensor, beta_1: Tensor, taus: Tensor) -> Tensor:
    alpha = torch.exp(-0.5 * taus**2 * (beta_1 - beta_0) - taus * beta_0)
    d_log_alpha = -taus * (beta_1 - beta_0) - beta_0
    return -0.5 * d_log_alpha / torch.sqrt(alpha * (1 - alpha))


def deis_coefficients(sigmas: Tensor, max_order: int) -> list[list[float]]:
    """Per step, the weights of the current and up to ``max_order - 1`` earlier derivatives
    (empty for a first-order step)."""
    times, beta_0, beta_1 = _vp_times(sigmas)
    out: list[list[float]] = []
    for i in range(len(times) - 1):
        order = min(i + 1, max_order)
        if order == 1:
            out.append([])
            continue
        t_cur, t_next = times[i], times[i + 1]
        taus = torch.linspace(float(t_cur), float(t_next), _POINTS)
        dtau = (t_next - t_cur) / _POINTS
        integrand = _integrand(beta_0, beta_1, taus)
        previous = [times[i - k] for k in range(order)]
        row: list[float] = []
        for j in range(order):
            basis = torch.ones_like(taus)
            for k in range(order):
                if k != j:
                    basis = basis * (taus - previous[k]) / (previous[j] - previous[k])
            row.append(float(torch.sum(integrand * basis) * dtau))
        out.append(row)
    return out
