"""SA-Solver (Xue et al., NeurIPS 2023, arXiv 2309.05019): stochastic Adams predictor-corrector
in data prediction, predictor order 3, corrector order 4, and ``sa_solver_pece`` which evaluates
the model again on each corrected state.

The stochasticity ``tau`` is 1 while the next sigma lies between the model's
``percent_to_sigma(0.2)`` and ``percent_to_sigma(0.8)`` and 0 outside (ComfyUI's default
interval, in sigma rather than the paper's time); its noise is
:class:`~core.sampling.noise.GaussianNoise` from the run's seed. Near the end of a run ending at
sigma 0 the orders drop so that no step uses points beyond the schedule.

Each step's weights integrate the Lagrange basis through the last ``k`` half-log-SNR points
against ``e^((1 + tau^2) lambda)``: the exponential moments ``integral e^((1+tau^2)(x - t)) x^p dx``
come from integration by parts (a lower-triangular recursion), and the basis integrals from a
transposed Vandermonde solve.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from core.sampling.model_sampling import ModelSampling
from core.sampling.noise import GaussianNoise
from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma
from core.sampling.samplers.dpmpp import half_log_snr, offset_first_sigma


def exponential_moments(s: Tensor, t: Tensor, order: int, tau: float) -> Tensor:
    """``(1 + tau^2) * integral_s^t e^((1 + tau^2)(x - t)) x^p dx`` for ``p = 0 .. order - 1``."""
    k = 1 + tau**2
    p = torch.arange(order, dtype=s.dtype, device=s.device)
    boundary = t**p - s**p * (-k * (t - s)).exp()
    depth = p.unsqueeze(1) - p.unsqueeze(0)
    log_fact = (p + 1).lgamma()
    log_coeff = log_fact.unsqueeze(1) - log_fact.unsqueeze(0)
    if tau > 0:
        log_coeff = log_coeff - depth * math.log(k)
    signs = torch.where(depth % 2 == 0, 1.0, -1.0)
    return (log_coeff.exp() * signs).tril() @ boundary


def adams_weights(
    sigma_next: Tensor, points: Tensor, lambda_s: Tensor, lambda_t: Tensor, tau: float
) -> Tensor:
    """The weights of the estimates at half-log-SNR ``points`` for a step ``lambda_s -> lambda_t``."""
    n = points.shape[0]
    moments = exponential_moments(lambda_s, lambda_t, n, tau)
    basis: Tensor = torch.linalg.solve(torch.vander(points, n, increasing=True).T, moments)
    return sigma_next * lambda_t.exp() * basis


def _tau(ms: ModelSampling) -> tuple[float, float]:
    return ms.percent_to_sigma(0.2), ms.percent_to_sigma(0.8)


def _sa_solver(
    model: ModelFn,
    x: Tensor,
    sigmas: Tensor,
    ctx: SamplerContext,
    *,
    pece: bool,
    predictor: int = 3,
    corrector: int = 4,
) -> Tensor:
    if len(sigmas) <= 1:
        return x
    ms, s_noise = ctx.sampling, ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    sigmas = offset_first_sigma(sigmas, ms)
    lambdas = half_log_snr(sigmas, ms)
    start, end = _tau(ms)
    keep = max(predictor, corrector)
    x_pred, h, tau, step_noise = x, sigmas.new_tensor(0.0), 0.0, torch.zeros_like(x)
    estimates: list[Tensor] = []
    to_end = float(sigmas[-1]) == 0
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x_pred, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        estimates = [*estimates, denoised][-keep:]
        p_order = min(predictor, len(estimates))
        c_order = 0 if i == 0 or (sigma_next == 0 and not pece) else min(corrector, len(estimates))
        if to_end:
            p_order = min(p_order, len(sigmas) - 2 - i)
            c_order = min(c_order, len(sigmas) - 1 - i)
        if c_order == 0:
            x = x_pred
        else:
            b = adams_weights(sigma, lambdas[i - c_order + 1 : i + 1], lambdas[i - 1], lambdas[i], tau)
            correction = torch.tensordot(torch.stack(estimates[-c_order:], dim=1), b, dims=([1], [0]))
            x = sigma / sigmas[i - 1] * (-(tau**2) * h).exp() * x + correction
            if tau > 0 and s_noise > 0:
                x = x + step_noise
            if pece:
                denoised = model(x, batch_sigma(x, sigma))
                estimates[-1] = denoised
        if sigma_next == 0:
            x = denoised
            continue
        tau = 1.0 if start >= float(sigma_next) >= end else 0.0
        b = adams_weights(sigma_next, lambdas[i - p_order + 1 : i + 1], lambdas[i], lambdas[i + 1], tau)
        prediction = torch.tensordot(torch.stack(estimates[-p_order:], dim=1), b, dims=([1], [0]))
        h = lambdas[i + 1] - lambdas[i]
        x_pred = sigma_next / sigma * (-(tau**2) * h).exp() * x + prediction
        if tau > 0 and s_noise > 0:
            scale = (-2 * tau**2 * h).expm1().neg().sqrt()
            step_noise = noise(sigma, sigma_next) * sigma_next * scale * s_noise
            x_pred = x_pred + step_noise
    return x


def sample_sa_solver(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _sa_solver(model, x, sigmas, ctx, pece=False)


def sample_sa_solver_pece(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _sa_solver(model, x, sigmas, ctx, pece=True)
