"""Linear multistep samplers on the Karras ODE ``dx/dsigma = (x - denoised) / sigma``: lms, ipndm,
ipndm_v, deis, and the gradient-estimation sampler.

They reuse the derivatives of earlier steps instead of extra model calls (one call per step), with
lower orders while the history fills. ``lms``: Adams-Bashforth with coefficients integrated
exactly over the sigma steps (order 4). ``ipndm``: the improved PNDM of Zhang & Chen (2023),
fixed-step Adams-Bashforth weights (order 4). ``ipndm_v``: its variable-step form. ``deis``:
DEIS (Zhang & Chen 2023) in its "tAB" form, coefficients from :mod:`.deis` (order 3).
``gradient_estimation``: Euler plus a correction from the change of the derivative (Permenter &
Yuan 2024, gamma 2).
"""

from __future__ import annotations

import numpy
from torch import Tensor

from core.sampling.samplers.base import ModelFn, SamplerContext, batch_sigma, to_d, with_uncond
from core.sampling.samplers.deis import deis_coefficients


def lms_coefficient(sigmas: numpy.ndarray, order: int, i: int, j: int) -> float:
    """The integral over ``[sigma_i, sigma_i+1]`` of the Lagrange basis polynomial that is 1 at
    ``sigma_(i-j)`` and 0 at the other ``order - 1`` points ``sigma_i .. sigma_(i-order+1)``."""
    poly = numpy.polynomial.Polynomial([1.0])
    for k in range(order):
        if k != j:
            poly *= numpy.polynomial.Polynomial([-sigmas[i - k], 1.0]) / (sigmas[i - j] - sigmas[i - k])
    antiderivative = poly.integ()
    return float(antiderivative(sigmas[i + 1]) - antiderivative(sigmas[i]))


def sample_lms(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, max_order: int = 4) -> Tensor:
    points = sigmas.detach().cpu().double().numpy()
    history: list[Tensor] = []
    for i in range(len(sigmas) - 1):
        sigma = sigmas[i]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        history = [*history, to_d(x, sigma, denoised)][-max_order:]
        if sigmas[i + 1] == 0:
            x = denoised
            continue
        order = min(i + 1, max_order)
        coeffs = [lms_coefficient(points, order, i, j) for j in range(order)]
        x = x + sum(c * d for c, d in zip(coeffs, reversed(history), strict=False))
    return x


def sample_ipndm(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, max_order: int = 4
) -> Tensor:
    history: list[Tensor] = []  # earlier derivatives, oldest first
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        d = (x - denoised) / sigma
        order = min(max_order, i + 1)
        if sigma_next == 0:
            x_next = denoised
        elif order == 1:
            x_next = x + (sigma_next - sigma) * d
        elif order == 2:
            x_next = x + (sigma_next - sigma) * (3 * d - history[-1]) / 2
        elif order == 3:
            x_next = x + (sigma_next - sigma) * (23 * d - 16 * history[-1] + 5 * history[-2]) / 12
        else:
            x_next = (
                x
                + (sigma_next - sigma) * (55 * d - 59 * history[-1] + 37 * history[-2] - 9 * history[-3]) / 24
            )
        history = [*history, d][-(max_order - 1) :]
        x = x_next
    return x


def _ipndm_v_coefficients(h: list[Tensor]) -> list[Tensor]:
    """Variable-step Adams-Bashforth weights for the current derivative and up to three earlier
    ones; ``h = [h_n, h_n-1, ...]`` are the last step sizes (this step's first)."""
    if len(h) == 2:
        q = h[0] / h[1]
        return [(2 + q) / 2, -q / 2]
    h_n, h_1, h_2 = h[0], h[1], h[2]
    t1 = (1 - h_n / (3 * (h_n + h_1)) * (h_n * (h_n + h_1)) / (h_1 * (h_1 + h_2))) / 2
    if len(h) == 3:
        return [(2 + h_n / h_1) / 2 + t1, -(h_n / h_1) / 2 - (1 + h_1 / h_2) * t1, t1 * h_1 / h_2]
    h_3 = h[3]
    t2 = (
        ((1 - h_n / (3 * (h_n + h_1))) / 2 + (1 - h_n / (2 * (h_n + h_1))) * h_n / (6 * (h_n + h_1 + h_2)))
        * (h_n * (h_n + h_1) * (h_n + h_1 + h_2))
        / (h_1 * (h_1 + h_2) * (h_1 + h_2 + h_3))
    )
    ratio = h_1 * (h_1 + h_2) / (h_2 * (h_2 + h_3))
    return [
        (2 + (h_n / h_1)) / 2 + t1 + t2,
        -(h_n / h_1) / 2 - (1 + h_1 / h_2) * t1 - (1 + (h_1 / h_2) + ratio) * t2,
        t1 * h_1 / h_2 + ((h_1 / h_2) + ratio * (1 + h_2 / h_3)) * t2,
        -t2 * ratio * h_1 / h_2,
    ]


def sample_ipndm_v(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, max_order: int = 4
) -> Tensor:
    history: list[Tensor] = []
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        d = (x - denoised) / sigma
        order = min(max_order, i + 1)
        if sigma_next == 0:
            x_next = denoised
        elif order == 1:
            x_next = x + (sigma_next - sigma) * d
        else:
            steps = [sigma_next - sigma] + [sigmas[i - k] - sigmas[i - k - 1] for k in range(order - 1)]
            coeffs = _ipndm_v_coefficients(steps)
            combined = coeffs[0] * d
            for k in range(1, order):
                combined = combined + coeffs[k] * history[-k]
            x_next = x + (sigma_next - sigma) * combined
        history = [*history, d][-(max_order - 1) :]
        x = x_next
    return x


def sample_deis(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, max_order: int = 3) -> Tensor:
    coefficients = deis_coefficients(sigmas, max_order)
    history: list[Tensor] = []
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        denoised = model(x, batch_sigma(x, sigma))
        ctx.report(i, denoised)
        d = (x - denoised) / sigma
        order = 1 if sigma_next <= 0 else min(max_order, i + 1)
        if order == 1:
            x_next = x + (sigma_next - sigma) * d
        else:
            c = coefficients[i]
            x_next = x + c[0] * d
            for k in range(1, order):
                x_next = x_next + c[k] * history[-k]
        history = [*history, d][-(max_order - 1) :]
        x = x_next
    return x


def _gradient_estimation(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, cfg_pp: bool, gamma: float = 2.0
) -> Tensor:
    previous: Tensor | None = None
    for i in range(len(sigmas) - 1):
        sigma, sigma_next = sigmas[i], sigmas[i + 1]
        if cfg_pp:
            denoised, uncond = with_uncond(model, x, batch_sigma(x, sigma))
            d = to_d(x, sigma, uncond)
        else:
            denoised = model(x, batch_sigma(x, sigma))
            d = to_d(x, sigma, denoised)
        ctx.report(i, denoised)
        dt = sigma_next - sigma
        if sigma_next == 0:
            x = denoised
        else:
            x = denoised + d * sigma_next if cfg_pp else x + d * dt
            if previous is not None:
                x = x + (gamma - 1) * (d - previous) * dt
        previous = d
    return x


def sample_gradient_estimation(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _gradient_estimation(model, x, sigmas, ctx, cfg_pp=False)


def sample_gradient_estimation_cfg_pp(
    model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext
) -> Tensor:
    return _gradient_estimation(model, x, sigmas, ctx, cfg_pp=True)
