"""Two-stage ancestral samplers: dpm_2_ancestral and dpmpp_2s_ancestral.

Each step goes down to ``sigma_down`` with one extra model call at a midpoint, then re-injects
fresh noise of ``sigma_up`` (:class:`~core.sampling.noise.GaussianNoise`, the run's seed on the
latent's device). For flow models both use the rectified-flow ancestral split (ComfyUI's ``*_RF``
forms): ``sigma_down = sigma_next (1 + (sigma_next / sigma - 1) eta)``, the state rescaled by
``(1 - sigma_next) / (1 - sigma_down)`` and noise of ``sqrt(sigma_next^2 - sigma_down^2
alpha_next^2 / alpha_down^2)``.
"""

from __future__ import annotations

from torch import Tensor

from core.sampling.noise import GaussianNoise
from core.sampling.samplers.ancestral import ancestral_step
from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma, to_d


def flow_ancestral_step(sigma: Tensor, sigma_next: Tensor, eta: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(sigma_down, rescale, renoise)`` of a rectified-flow ancestral step."""
    sigma_down = sigma_next * (1 + (sigma_next / sigma - 1) * eta)
    alpha_next, alpha_down = 1 - sigma_next, 1 - sigma_down
    renoise = (sigma_next**2 - sigma_down**2 * alpha_next**2 / alpha_down**2) ** 0.5
    return sigma_down, alpha_next / alpha_down, renoise


def _geometric_mid(a: Tensor, b: Tensor) -> Tensor:
    return a.log().lerp(b.log(), 0.5).exp()


def sample_dpm_2_ancestral(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """DPM-Solver-2 midpoint steps down to ``sigma_down``, then fresh noise."""
    eta, s_noise, flow = ctx.options.eta, ctx.options.s_noise, ctx.sampling.is_flow
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        sigma_up: Tensor | float
        rescale: Tensor | float = 1.0
        if flow:
            sigma_down, rescale, sigma_up = flow_ancestral_step(sigma, sigma_next, eta)
        else:
            sigma_down, sigma_up = ancestral_step(sigma, sigma_next, eta)
        d = to_d(x, sigma, denoised)
        if sigma_down == 0:
            x = x + d * (sigma_down - sigma)
            continue
        sigma_mid = _geometric_mid(sigma, sigma_down)
        x_mid = x + d * (sigma_mid - sigma)
        d_mid = to_d(x_mid, sigma_mid, model(x_mid, batch_sigma(x, sigma_mid)))
        x = x + d_mid * (sigma_down - sigma)
        if flow:
            x = rescale * x
        x = x + noise(sigma, sigma_next) * s_noise * sigma_up
    return x


def sample_dpmpp_2s_ancestral(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """DPM-Solver++(2S): a single-step second-order update in ``-log sigma`` with its midpoint
    at half the step, then fresh noise."""
    if ctx.sampling.is_flow:
        return _dpmpp_2s_ancestral_flow(model, x, sigmas, ctx)
    eta, s_noise = ctx.options.eta, ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        sigma_down, sigma_up = ancestral_step(sigma, sigma_next, eta)
        if sigma_down == 0:
            x = x + to_d(x, sigma, denoised) * (sigma_down - sigma)
        else:
            t, t_next = sigma.log().neg(), sigma_down.log().neg()
            h = t_next - t
            s = t + h / 2
            x_mid = (s.neg().exp() / t.neg().exp()) * x - (-h / 2).expm1() * denoised
            denoised_mid = model(x_mid, batch_sigma(x, s.neg().exp()))
            x = (t_next.neg().exp() / t.neg().exp()) * x - (-h).expm1() * denoised_mid
        if sigma_next > 0:
            x = x + noise(sigma, sigma_next) * s_noise * sigma_up
    return x


def _dpmpp_2s_ancestral_flow(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    eta, s_noise = ctx.options.eta, ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        sigma_down, rescale, renoise = flow_ancestral_step(sigma, sigma_next, eta)
        if sigma_next == 0:
            x = x + to_d(x, sigma, denoised) * (sigma_down - sigma)
        else:
            if sigma == 1.0:
                sigma_s = sigma.new_tensor(0.9999)
            else:
                lam, lam_down = ((1 - sigma) / sigma).log(), ((1 - sigma_down) / sigma_down).log()
                sigma_s = ((lam + (lam_down - lam) / 2).exp() + 1) ** -1
            ratio = sigma_s / sigma
            u = ratio * x + (1 - ratio) * denoised
            denoised_s = model(u, batch_sigma(x, sigma_s))
            ratio = sigma_down / sigma
            x = ratio * x + (1 - ratio) * denoised_s
        if sigma_next > 0 and eta > 0:
            x = rescale * x + noise(sigma, sigma_next) * s_noise * renoise
    return x
