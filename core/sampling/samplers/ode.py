"""Deterministic Karras-style ODE samplers: euler (also ComfyUI's ``ddim``), heun, dpm_2.

KSampler runs them without "churn" (no noise is added), which is what is implemented here.
"""

from __future__ import annotations

from torch import Tensor

from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma, to_d


def sample_euler(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        x = x + to_d(x, sigma, denoised) * (sigma_next - sigma)
    return x


def sample_heun(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """Heun's second-order method; the last step to sigma 0 is a plain Euler step."""
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        d = to_d(x, sigma, denoised)
        dt = sigma_next - sigma
        if sigma_next == 0:
            x = x + d * dt
            continue
        x_euler = x + d * dt
        d_next = to_d(x_euler, sigma_next, model(x_euler, batch_sigma(x, sigma_next)))
        x = x + (d + d_next) / 2 * dt
    return x


def sample_dpm_2(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """DPM-Solver-2 flavoured midpoint method: the derivative is taken again at the geometric
    midpoint of sigma and the next sigma."""
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        d = to_d(x, sigma, denoised)
        if sigma_next == 0:
            x = x + d * (sigma_next - sigma)
            continue
        sigma_mid = sigma.log().lerp(sigma_next.log(), 0.5).exp()
        x_mid = x + d * (sigma_mid - sigma)
        d_mid = to_d(x_mid, sigma_mid, model(x_mid, batch_sigma(x, sigma_mid)))
        x = x + d_mid * (sigma_next - sigma)
    return x
