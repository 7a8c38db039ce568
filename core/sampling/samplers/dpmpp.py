"""DPM-Solver++ samplers (Lu et al. 2022): dpmpp_2m, dpmpp_2m_sde (midpoint, and heun as
dpmpp_2m_sde_heun), dpmpp_sde, and ComfyUI's ``_gpu`` forms of the SDE ones, which differ only in
keeping the Brownian tree on the latent's device.

They step in half-log-SNR ``lambda = log(alpha / sigma)``: ``-log(sigma)`` on the
variance-exploding scale of eps/v models, ``log((1 - sigma) / sigma)`` for flow models (where a
first sigma of 1 is moved to ``percent_to_sigma(1e-4)`` to keep lambda finite). The SDE variants
draw :class:`~core.sampling.noise.BrownianNoise` seeded with the run's seed.
"""

from __future__ import annotations

from torch import Tensor

from core.sampling.model_sampling import ModelSampling
from core.sampling.noise import BrownianNoise
from core.sampling.samplers.ancestral import ancestral_step
from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma


def half_log_snr(sigma: Tensor, ms: ModelSampling) -> Tensor:
    return sigma.logit().neg() if ms.is_flow else sigma.log().neg()


def sigma_of_half_log_snr(lam: Tensor, ms: ModelSampling) -> Tensor:
    return lam.neg().sigmoid() if ms.is_flow else lam.neg().exp()


def offset_first_sigma(sigmas: Tensor, ms: ModelSampling, percent: float = 1e-4) -> Tensor:
    if len(sigmas) > 1 and ms.is_flow and sigmas[0] >= 1:
        sigmas = sigmas.clone()
        sigmas[0] = ms.percent_to_sigma(percent)
    return sigmas


def _brownian(x: Tensor, sigmas: Tensor, seed: int, on_device: bool = False) -> BrownianNoise:
    return BrownianNoise(x, sigmas[sigmas > 0].min(), sigmas.max(), seed, on_device=on_device)


def sample_dpmpp_2m(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """Second-order multistep: the previous step's denoised estimate extrapolates this one."""
    previous: Tensor | None = None
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        t, t_next = sigma.log().neg(), sigma_next.log().neg()
        h = t_next - t
        if previous is not None and sigma_next != 0:
            r = (t - sigmas[i - 1].log().neg()) / h
            estimate = (1 + 1 / (2 * r)) * denoised - (1 / (2 * r)) * previous
        else:
            estimate = denoised
        x = (t_next.neg().exp() / t.neg().exp()) * x - (-h).expm1() * estimate
        previous = denoised
    return x


def sample_dpmpp_2m_sde(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _dpmpp_2m_sde(model, x, sigmas, ctx, ctx.options.solver_type, on_device=False)


def sample_dpmpp_2m_sde_gpu(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _dpmpp_2m_sde(model, x, sigmas, ctx, ctx.options.solver_type, on_device=True)


def sample_dpmpp_2m_sde_heun(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _dpmpp_2m_sde(model, x, sigmas, ctx, "heun", on_device=False)


def sample_dpmpp_2m_sde_heun_gpu(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _dpmpp_2m_sde(model, x, sigmas, ctx, "heun", on_device=True)


def _dpmpp_2m_sde(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, solver_type: str, *, on_device: bool
) -> Tensor:
    if len(sigmas) <= 1:
        return x
    opts, ms = ctx.options, ctx.sampling
    if solver_type not in ("midpoint", "heun"):
        raise ValueError(f"solver_type must be 'midpoint' or 'heun', not {solver_type!r}")
    eta, s_noise = opts.eta, opts.s_noise
    noise = _brownian(x, sigmas, ctx.seed, on_device)
    sigmas = offset_first_sigma(sigmas, ms)
    previous: Tensor | None = None
    h: Tensor | None = None
    h_last: Tensor | None = None
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
            if previous is not None and h_last is not None:
                r = h_last / h
                if solver_type == "heun":
                    phi = (-h_eta).expm1().neg() / (-h_eta) + 1
                    x = x + alpha_t * phi * (1 / r) * (denoised - previous)
                else:
                    x = x + 0.5 * alpha_t * (-h_eta).expm1().neg() * (1 / r) * (denoised - previous)
            if eta > 0 and s_noise > 0:
                scale = (-2 * h * eta).expm1().neg().sqrt()
                x = x + noise(sigma, sigma_next) * sigma_next * scale * s_noise
        previous = denoised
        h_last = h
    return x


def sample_dpmpp_sde(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    """Stochastic DPM-Solver++ with one intermediate model call at ``lambda_s + r * h``."""
    return _dpmpp_sde(model, x, sigmas, ctx, on_device=False)


def sample_dpmpp_sde_gpu(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _dpmpp_sde(model, x, sigmas, ctx, on_device=True)


def _dpmpp_sde(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, *, on_device: bool) -> Tensor:
    if len(sigmas) <= 1:
        return x
    opts, ms = ctx.options, ctx.sampling
    eta, s_noise, r = opts.eta, opts.s_noise, opts.r
    noise = _brownian(x, sigmas, ctx.seed, on_device)
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
        lambda_mid = lambda_s + r * h
        sigma_mid = sigma_of_half_log_snr(lambda_mid, ms)
        alpha_s = sigma * lambda_s.exp()
        alpha_mid = sigma_mid * lambda_mid.exp()
        alpha_t = sigma_next * lambda_t.exp()

        # to the intermediate point
        sd, su = ancestral_step(lambda_s.neg().exp(), lambda_mid.neg().exp(), eta)
        h_ = sd.log().neg() - lambda_s
        x_mid = (alpha_mid / alpha_s) * (-h_).exp() * x - alpha_mid * (-h_).expm1() * denoised
        if eta > 0 and s_noise > 0:
            x_mid = x_mid + alpha_mid * noise(sigma, sigma_mid) * s_noise * su
        denoised_mid = model(x_mid, batch_sigma(x, sigma_mid))

        # the full step with the combined estimate
        sd, su = ancestral_step(lambda_s.neg().exp(), lambda_t.neg().exp(), eta)
        h_ = sd.log().neg() - lambda_s
        estimate = (1 - fac) * denoised + fac * denoised_mid
        x = (alpha_t / alpha_s) * (-h_).exp() * x - alpha_t * (-h_).expm1() * estimate
        if eta > 0 and s_noise > 0:
            x = x + alpha_t * noise(sigma, sigma_next) * s_noise * su
    return x
