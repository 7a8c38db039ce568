"""Deterministic Karras-style ODE samplers: euler (also ComfyUI's ``ddim``), heun, dpm_2, heunpp2.

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


def sample_heunpp2(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """Heun++ (third-order where two more sigmas remain): the derivative is averaged over this
    sigma and the next one or two, each weighted by its sigma over ``2`` or ``3`` times the first
    sigma of the run; the last step is Euler."""
    s_end = sigmas[-1]
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        d = to_d(x, sigma, denoised)
        dt = sigma_next - sigma
        if sigma_next == s_end:
            x = x + d * dt
            continue
        x_2 = x + d * dt
        d_2 = to_d(x_2, sigma_next, model(x_2, batch_sigma(x, sigma_next)))
        if sigmas[i + 2] == s_end:
            w2 = sigma_next / (2 * sigmas[0])
            x = x + (d * (1 - w2) + d_2 * w2) * dt
            continue
        sigma_after = sigmas[i + 2]
        x_3 = x_2 + d_2 * (sigma_after - sigma_next)
        d_3 = to_d(x_3, sigma_after, model(x_3, batch_sigma(x, sigma_after)))
        w = 3 * sigmas[0]
        w2, w3 = sigma_next / w, sigma_after / w
        x = x + ((1 - w2 - w3) * d + w2 * d_2 + w3 * d_3) * dt
    return x
