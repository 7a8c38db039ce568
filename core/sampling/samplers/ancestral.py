"""Samplers that re-inject fresh Gaussian noise each step: euler_ancestral and lcm.

Their noise is :class:`~core.sampling.noise.GaussianNoise` seeded with the run's seed on the
latent's device (ComfyUI's ``default_noise_sampler``). For flow models euler_ancestral uses the
rectified-flow form of the ancestral step (ComfyUI's ``sample_euler_ancestral_RF``).
"""

from __future__ import annotations

from torch import Tensor

from core.sampling.noise import GaussianNoise
from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma, to_d


def ancestral_step(sigma: Tensor, sigma_next: Tensor, eta: float) -> tuple[Tensor, Tensor | float]:
    """Split a step into a deterministic part down to ``sigma_down`` and noise of ``sigma_up``."""
    if not eta:
        return sigma_next, 0.0
    sigma_up = min(sigma_next, eta * (sigma_next**2 * (sigma**2 - sigma_next**2) / sigma**2) ** 0.5)
    sigma_down = (sigma_next**2 - sigma_up**2) ** 0.5
    return sigma_down, sigma_up


def sample_euler_ancestral(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    if ctx.sampling.is_flow:
        return _euler_ancestral_flow(model, x, sigmas, ctx)
    eta, s_noise = ctx.options.eta, ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        sigma_down, sigma_up = ancestral_step(sigma, sigma_next, eta)
        if sigma_down == 0:
            x = denoised
        else:
            x = (
                x
                + to_d(x, sigma, denoised) * (sigma_down - sigma)
                + noise(sigma, sigma_next) * s_noise * sigma_up
            )
    return x


def _euler_ancestral_flow(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """Step to a lower sigma along the flow, then re-noise to ``sigma_next`` with the
    flow's own mixing (``x = (1 - s) x0 + s noise``)."""
    eta, s_noise = ctx.options.eta, ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        if sigma_next == 0:
            x = denoised
            continue
        sigma_down = sigma_next * (1 + (sigma_next / sigma - 1) * eta)
        alpha_next, alpha_down = 1 - sigma_next, 1 - sigma_down
        renoise = (sigma_next**2 - sigma_down**2 * alpha_next**2 / alpha_down**2) ** 0.5
        ratio = sigma_down / sigma
        x = ratio * x + (1 - ratio) * denoised
        if eta > 0:
            x = (alpha_next / alpha_down) * x + noise(sigma, sigma_next) * s_noise * renoise
    return x


def sample_lcm(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """Latent consistency: jump to the denoised estimate, then noise it to the next sigma."""
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        x = model(x, batch_sigma(x, sigma))
        ctx.report(i, x)
        if sigma_next > 0:
            x = ctx.sampling.noise_scaling(sigma_next, noise(sigma, sigma_next), x)
    return x
