"""CFG++ samplers (Chung et al. 2024, arXiv 2406.08070): euler_cfg_pp, euler_ancestral_cfg_pp,
dpmpp_2m_cfg_pp, dpmpp_2s_ancestral_cfg_pp.

A CFG++ step denoises with the guided estimate but re-noises along the *unguided* (negative
prompt) one, which keeps the path on the data manifold at low guidance scales (ComfyUI's advice:
CFG about 1-2). The unguided estimate comes from the guided model's ``with_uncond``; the negative
is evaluated even at CFG 1, as ComfyUI does for these samplers. The ancestral forms re-inject
:class:`~core.sampling.noise.GaussianNoise` seeded with the run's seed.
"""

from __future__ import annotations

from torch import Tensor

from core.sampling.noise import GaussianNoise
from core.sampling.samplers.ancestral import ancestral_step
from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma, to_d, with_uncond
from core.sampling.samplers.dpmpp import half_log_snr


def _euler_cfg_pp(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, eta: float, s_noise: float
) -> Tensor:
    ms = ctx.sampling
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised, uncond = with_uncond(model, x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        if sigma_next == 0:
            x = denoised
            continue
        alpha_s = sigma * half_log_snr(sigma, ms).exp()
        alpha_t = sigma_next * half_log_snr(sigma_next, ms).exp()
        d = to_d(x, sigma, alpha_s * uncond)
        sigma_down, sigma_up = ancestral_step(sigma / alpha_s, sigma_next / alpha_t, eta)
        x = alpha_t * denoised + alpha_t * sigma_down * d
        if eta > 0 and s_noise > 0:
            x = x + alpha_t * noise(sigma, sigma_next) * s_noise * sigma_up
    return x


def sample_euler_cfg_pp(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _euler_cfg_pp(model, x, sigmas, ctx, eta=0.0, s_noise=0.0)


def sample_euler_ancestral_cfg_pp(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _euler_cfg_pp(model, x, sigmas, ctx, eta=ctx.options.eta, s_noise=ctx.options.s_noise)


def sample_dpmpp_2m_cfg_pp(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """DPM-Solver++(2M) whose carried-over state is the unguided estimate."""
    previous: Tensor | None = None
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised, uncond = with_uncond(model, x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        t, t_next = sigma.log().neg(), sigma_next.log().neg()
        h = t_next - t
        if previous is None or sigma_next == 0:
            mix = -(-h).exp() * uncond
        else:
            r = (t - sigmas[i - 1].log().neg()) / h
            mix = -(-h).exp() * uncond - (-h).expm1() * (1 / (2 * r)) * (denoised - previous)
        x = denoised + mix + (-h).exp() * x
        previous = uncond
    return x


def sample_dpmpp_2s_ancestral_cfg_pp(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext
) -> Tensor:
    eta, s_noise = ctx.options.eta, ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised, uncond = with_uncond(model, x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        sigma_down, sigma_up = ancestral_step(sigma, sigma_next, eta)
        if sigma_down == 0:
            x = denoised + to_d(x, sigma, uncond) * sigma_down
        else:
            t, t_next = sigma.log().neg(), sigma_down.log().neg()
            h = t_next - t
            s = t + h / 2
            x_mid = (s.neg().exp() / t.neg().exp()) * (x + (denoised - uncond)) - (-h / 2).expm1() * denoised
            denoised_mid, uncond_mid = with_uncond(model, x_mid, batch_sigma(x, s.neg().exp()))
            # ComfyUI's hook has by now replaced the negative's estimate with the midpoint's
            x = (t_next.neg().exp() / t.neg().exp()) * (x + (denoised - uncond_mid)) - (
                -h
            ).expm1() * denoised_mid
        if sigma_next > 0:
            x = x + noise(sigma, sigma_next) * s_noise * sigma_up
    return x
