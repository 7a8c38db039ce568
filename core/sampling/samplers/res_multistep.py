"""res_multistep (Zhang et al., "RES" exponential multistep, arXiv 2308.02157) and its CFG++ and
ancestral forms.

A second-order exponential-integrator step in ``t = -log sigma`` that takes the previous step's
denoised estimate as the second point: ``x = e^-h x + h (b1 D_i + b2 D_i-1)`` with
``b1 = phi1(-h) - phi2(-h) / c2``, ``b2 = phi2(-h) / c2``. The first step (and any step that ends
at 0) is Euler. The ancestral forms step to ``sigma_down`` and add
:class:`~core.sampling.noise.GaussianNoise` of ``sigma_up`` (``eta``); the plain forms run with
eta 0. The CFG++ forms step along the negative prompt's estimate and carry it as the history.
"""

from __future__ import annotations

import torch
from torch import Tensor

from core.sampling.noise import GaussianNoise
from core.sampling.samplers.ancestral import ancestral_step
from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma, to_d, with_uncond


def _phi1(t: Tensor) -> Tensor:
    return torch.expm1(t) / t


def _phi2(t: Tensor) -> Tensor:
    return (_phi1(t) - 1.0) / t


def _res_multistep(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, *, eta: float, cfg_pp: bool
) -> Tensor:
    s_noise = ctx.options.s_noise
    noise = GaussianNoise(x, ctx.seed)
    old_denoised: Tensor | None = None
    old_sigma_down: Tensor | None = None
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        if cfg_pp:
            denoised, uncond = with_uncond(model, x, batch_sigma(x, sigma))
        else:
            denoised = model(x, batch_sigma(x, sigma))
            uncond = denoised
        ctx.report(i, denoised)
        sigma_down, sigma_up = ancestral_step(sigma, sigma_next, eta)
        if sigma_down == 0 or old_denoised is None or old_sigma_down is None:
            if cfg_pp:
                x = denoised + to_d(x, sigma, uncond) * sigma_down
            else:
                x = x + to_d(x, sigma, denoised) * (sigma_down - sigma)
        else:
            t, t_next = sigma.log().neg(), torch.as_tensor(sigma_down).log().neg()
            t_old, t_prev = old_sigma_down.log().neg(), sigmas[i - 1].log().neg()
            h = t_next - t
            c2 = (t_prev - t_old) / h
            phi1, phi2 = _phi1(-h), _phi2(-h)
            b1 = torch.nan_to_num(phi1 - phi2 / c2, nan=0.0)
            b2 = torch.nan_to_num(phi2 / c2, nan=0.0)
            if cfg_pp:
                x = x + (denoised - uncond)
            x = (-h).exp() * x + h * (b1 * uncond + b2 * old_denoised)
        if sigma_next > 0 and eta:
            x = x + noise(sigma, sigma_next) * s_noise * sigma_up
        old_denoised = uncond
        old_sigma_down = torch.as_tensor(sigma_down)
    return x


def sample_res_multistep(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _res_multistep(model, x, sigmas, ctx, eta=0.0, cfg_pp=False)


def sample_res_multistep_cfg_pp(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _res_multistep(model, x, sigmas, ctx, eta=0.0, cfg_pp=True)


def sample_res_multistep_ancestral(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _res_multistep(model, x, sigmas, ctx, eta=ctx.options.eta, cfg_pp=False)


def sample_res_multistep_ancestral_cfg_pp(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext
) -> Tensor:
    return _res_multistep(model, x, sigmas, ctx, eta=ctx.options.eta, cfg_pp=True)
