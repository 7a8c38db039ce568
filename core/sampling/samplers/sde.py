"""Stochastic samplers in half-log-SNR: dpmpp_3m_sde, er_sde, seeds_2, seeds_3, and ddpm.

``lambda = log(alpha / sigma)`` (``-log sigma`` for eps/v models, ``log((1 - sigma) / sigma)`` for
flow models, whose first sigma of 1 moves to ``percent_to_sigma(1e-4)``).

- ``dpmpp_3m_sde``: DPM-Solver++(3M) SDE (Lu et al. 2022), third-order multistep with Brownian
  noise (:class:`~core.sampling.noise.BrownianNoise`; ``on_device`` for ComfyUI's ``_gpu`` form).
- ``er_sde``: the extended reverse-time SDE solver, 3 stages (Cui et al. 2023, arXiv 2309.06169),
  noise scale function ``x (e^(x^0.3) + 10)``, 200-point integrals.
- ``seeds_2`` / ``seeds_3``: stochastic explicit exponential derivative-free solvers (Gonzalez et
  al. 2023, arXiv 2305.14267), 2 and 3 stages, data prediction.
- ``ddpm``: the DDPM posterior step (Ho et al. 2020) on the VP view of the sigmas.

er_sde, seeds and ddpm draw :class:`~core.sampling.noise.GaussianNoise` from the run's seed.
"""

from __future__ import annotations

import torch
from torch import Tensor

from core.sampling.noise import BrownianNoise, GaussianNoise
from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma
from core.sampling.samplers.dpmpp import half_log_snr, offset_first_sigma, sigma_of_half_log_snr


def _dpmpp_3m_sde(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, on_device: bool) -> Tensor:
    if len(sigmas) <= 1:
        return x
    ms, eta, s_noise = ctx.sampling, ctx.options.eta, ctx.options.s_noise
    noise = BrownianNoise(x, sigmas[sigmas > 0].min(), sigmas.max(), ctx.seed, on_device=on_device)
    sigmas = offset_first_sigma(sigmas, ms)
    d_1: Tensor | None = None
    d_2: Tensor | None = None
    h: Tensor | None = None
    h_1: Tensor | None = None
    h_2: Tensor | None = None
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        if sigma_next == 0:
            x = denoised
        else:
            lambda_s, lambda_t = half_log_snr(sigma, ms), half_log_snr(sigma_next, ms)
            h = lambda_t - lambda_s
            h_eta = h * (eta + 1)
            alpha_t = sigma_next * lambda_t.exp()
            x = sigma_next / sigma * (-h * eta).exp() * x + alpha_t * (-h_eta).expm1().neg() * denoised
            phi_2 = h_eta.neg().expm1() / h_eta + 1
            if h_2 is not None and h_1 is not None and d_1 is not None and d_2 is not None:
                r0, r1 = h_1 / h, h_2 / h
                d1_0 = (denoised - d_1) / r0
                d1_1 = (d_1 - d_2) / r1
                d1 = d1_0 + (d1_0 - d1_1) * r0 / (r0 + r1)
                d2 = (d1_0 - d1_1) / (r0 + r1)
                phi_3 = phi_2 / h_eta - 0.5
                x = x + (alpha_t * phi_2) * d1 - (alpha_t * phi_3) * d2
            elif h_1 is not None and d_1 is not None:
                x = x + (alpha_t * phi_2) * ((denoised - d_1) / (h_1 / h))
            if eta > 0 and s_noise > 0:
                x = x + noise(sigma, sigma_next) * sigma_next * (-2 * h * eta).expm1().neg().sqrt() * s_noise
        d_1, d_2 = denoised, d_1
        h_1, h_2 = h, h_1
    return x


def sample_dpmpp_3m_sde(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _dpmpp_3m_sde(model, x, sigmas, ctx, on_device=False)


def sample_dpmpp_3m_sde_gpu(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _dpmpp_3m_sde(model, x, sigmas, ctx, on_device=True)


def _er_noise_scale(x: Tensor) -> Tensor:
    return x * ((x**0.3).exp() + 10.0)


def sample_er_sde(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, max_stage: int = 3, points: float = 200.0
) -> Tensor:
    ms, s_noise = ctx.sampling, ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    index = torch.arange(0, points, dtype=torch.float32, device=x.device)
    sigmas = offset_first_sigma(sigmas, ms)
    er = half_log_snr(sigmas, ms).neg().exp()  # sigma / alpha
    old_denoised: Tensor | None = None
    old_d: Tensor | None = None
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        stage = min(max_stage, i + 1)
        if sigma_next == 0:
            x = denoised
        else:
            er_s, er_t = er[i], er[i + 1]
            alpha_s, alpha_t = sigma / er_s, sigma_next / er_t
            r = _er_noise_scale(er_t) / _er_noise_scale(er_s)
            x = alpha_t / alpha_s * r * x + alpha_t * (1 - r) * denoised
            if stage >= 2 and old_denoised is not None:
                dt = er_t - er_s
                step = -dt / points
                pos = er_t + index * step
                scaled = _er_noise_scale(pos)
                s = torch.sum(1 / scaled) * step
                d = (denoised - old_denoised) / (er_s - er[i - 1])
                x = x + alpha_t * (dt + s * _er_noise_scale(er_t)) * d
                if stage >= 3 and old_d is not None:
                    s_u = torch.sum((pos - er_s) / scaled) * step
                    u = (d - old_d) / ((er_s - er[i - 2]) / 2)
                    x = x + alpha_t * ((dt**2) / 2 + s_u * _er_noise_scale(er_t)) * u
                old_d = d
            if s_noise > 0:
                scale = (er_t**2 - er_s**2 * r**2).sqrt().nan_to_num(nan=0.0)
                x = x + alpha_t * noise(sigma, sigma_next) * s_noise * scale
        old_denoised = denoised
    return x


def _h_phi_1(h: Tensor) -> Tensor:
    return torch.expm1(h)


def _h_phi_2(h: Tensor) -> Tensor:
    return (torch.expm1(h) - h) / h


def sample_seeds_2(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, r: float = 0.5) -> Tensor:
    ms, eta, s_noise = ctx.sampling, ctx.options.eta, ctx.options.s_noise
    inject = eta > 0 and s_noise > 0
    noise = GaussianNoise(x, ctx.seed)
    sigmas = offset_first_sigma(sigmas, ms)
    fac = 1 / (2 * r)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        if sigma_next == 0:
            x = denoised
            continue
        lambda_s, lambda_t = half_log_snr(sigma, ms), half_log_snr(sigma_next, ms)
        h = lambda_t - lambda_s
        h_eta = h * (eta + 1)
        lambda_1 = torch.lerp(lambda_s, lambda_t, r)
        sigma_1 = sigma_of_half_log_snr(lambda_1, ms)
        alpha_1, alpha_t = sigma_1 * lambda_1.exp(), sigma_next * lambda_t.exp()
        x_2 = sigma_1 / sigma * (-r * h * eta).exp() * x - alpha_1 * _h_phi_1(-r * h_eta) * denoised
        if inject:
            sde = (-2 * r * h * eta).expm1().neg().sqrt() * noise(sigma, sigma_1)
            x_2 = x_2 + sde * sigma_1 * s_noise
        denoised_2 = model(x_2, batch_sigma(x, sigma_1))
        estimate = torch.lerp(denoised, denoised_2, fac)
        x = sigma_next / sigma * (-h * eta).exp() * x - alpha_t * _h_phi_1(-h_eta) * estimate
        if inject:
            seg = (r - 1) * h * eta
            sde = sde * seg.exp() + seg.mul(2).expm1().neg().sqrt() * noise(sigma_1, sigma_next)
            x = x + sde * sigma_next * s_noise
    return x


def sample_seeds_3(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, r_1: float = 1.0 / 3, r_2: float = 2.0 / 3
) -> Tensor:
    ms, eta, s_noise = ctx.sampling, ctx.options.eta, ctx.options.s_noise
    inject = eta > 0 and s_noise > 0
    noise = GaussianNoise(x, ctx.seed)
    sigmas = offset_first_sigma(sigmas, ms)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        if sigma_next == 0:
            x = denoised
            continue
        lambda_s, lambda_t = half_log_snr(sigma, ms), half_log_snr(sigma_next, ms)
        h = lambda_t - lambda_s
        h_eta = h * (eta + 1)
        lambda_1, lambda_2 = torch.lerp(lambda_s, lambda_t, r_1), torch.lerp(lambda_s, lambda_t, r_2)
        sigma_1, sigma_2 = sigma_of_half_log_snr(lambda_1, ms), sigma_of_half_log_snr(lambda_2, ms)
        alpha_1, alpha_2 = sigma_1 * lambda_1.exp(), sigma_2 * lambda_2.exp()
        alpha_t = sigma_next * lambda_t.exp()

        x_2 = sigma_1 / sigma * (-r_1 * h * eta).exp() * x - alpha_1 * _h_phi_1(-r_1 * h_eta) * denoised
        if inject:
            sde = (-2 * r_1 * h * eta).expm1().neg().sqrt() * noise(sigma, sigma_1)
            x_2 = x_2 + sde * sigma_1 * s_noise
        denoised_2 = model(x_2, batch_sigma(x, sigma_1))

        a3_2 = r_2 / r_1 * _h_phi_2(-r_2 * h_eta)
        a3_1 = _h_phi_1(-r_2 * h_eta) - a3_2
        x_3 = sigma_2 / sigma * (-r_2 * h * eta).exp() * x - alpha_2 * (a3_1 * denoised + a3_2 * denoised_2)
        if inject:
            seg = (r_1 - r_2) * h * eta
            sde = sde * seg.exp() + seg.mul(2).expm1().neg().sqrt() * noise(sigma_1, sigma_2)
            x_3 = x_3 + sde * sigma_2 * s_noise
        denoised_3 = model(x_3, batch_sigma(x, sigma_2))

        b3 = _h_phi_2(-h_eta) / r_2
        b1 = _h_phi_1(-h_eta) - b3
        x = sigma_next / sigma * (-h * eta).exp() * x - alpha_t * (b1 * denoised + b3 * denoised_3)
        if inject:
            seg = (r_2 - 1) * h * eta
            sde = sde * seg.exp() + seg.mul(2).expm1().neg().sqrt() * noise(sigma_2, sigma_next)
            x = x + sde * sigma_next * s_noise
    return x


def sample_ddpm(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        eps = (x - denoised) / sigma
        x_vp = x / torch.sqrt(1.0 + sigma**2.0)
        abar, abar_next = 1 / ((sigma * sigma) + 1), 1 / ((sigma_next * sigma_next) + 1)
        alpha = abar / abar_next
        x = (1.0 / alpha).sqrt() * (x_vp - (1 - alpha) * eps / (1 - abar).sqrt())
        if sigma_next > 0:
            x = x + ((1 - alpha) * (1.0 - abar_next) / (1.0 - abar)).sqrt() * noise(sigma, sigma_next)
            x = x * torch.sqrt(1.0 + sigma_next**2.0)
    return x
