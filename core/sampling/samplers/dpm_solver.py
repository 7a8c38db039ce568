"""DPM-Solver (Lu et al. 2022, arXiv 2206.00927) in noise prediction: dpm_fast and dpm_adaptive.

Both ignore the scheduler's inner sigmas: they walk ``t = -log sigma`` from the first sigma to the
last non-zero one (the one before a final 0). ``dpm_fast``: ``steps`` model calls spread as
third-order steps on an even grid in ``t`` (``floor(steps / 3) + 1`` steps, the last ones of
order 2 and 1 to spend the calls exactly). ``dpm_adaptive``: DPM-Solver-23 with step-size
control (rtol 0.05, atol 0.0078, first step 0.05 in ``t``, integral controller, accept at 0.81);
the number of model calls depends on the picture. As in ComfyUI's KSampler both run without
noise (eta 0), and the result is the state at the last non-zero sigma (not denoised to 0).
A model output that is not a number stops dpm_adaptive with an error (ComfyUI loops forever).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from core.errors import LoadoutError
from core.sampling.samplers.base import ModelFn, SamplerContext


@dataclass
class _Solver:
    model: ModelFn
    ctx: SamplerContext
    step: int = 0
    cache: dict[str, Tensor] = field(default_factory=dict)

    def eps(self, key: str, x: Tensor, t: Tensor) -> Tensor:
        if key not in self.cache:
            sigma = t.neg().exp()
            self.cache[key] = (x - self.model(x, sigma * x.new_ones([x.shape[0]]))) / sigma
        return self.cache[key]

    def first(self, x: Tensor, t: Tensor) -> Tensor:
        """The step's first evaluation; reported as the step's denoised estimate."""
        self.cache = {}
        eps = self.eps("eps", x, t)
        self.ctx.report(self.step, x - t.neg().exp() * eps)
        self.step += 1
        return eps

    def order_1(self, x: Tensor, t: Tensor, t_next: Tensor) -> Tensor:
        h = t_next - t
        return x - t_next.neg().exp() * h.expm1() * self.eps("eps", x, t)

    def order_2(self, x: Tensor, t: Tensor, t_next: Tensor, r1: float = 1 / 2) -> Tensor:
        h = t_next - t
        eps = self.eps("eps", x, t)
        s1 = t + r1 * h
        u1 = x - s1.neg().exp() * (r1 * h).expm1() * eps
        eps_r1 = self.eps("eps_r1", u1, s1)
        sig_next = t_next.neg().exp()
        return x - sig_next * h.expm1() * eps - sig_next / (2 * r1) * h.expm1() * (eps_r1 - eps)

    def order_3(self, x: Tensor, t: Tensor, t_next: Tensor, r1: float = 1 / 3, r2: float = 2 / 3) -> Tensor:
        h = t_next - t
        eps = self.eps("eps", x, t)
        s1, s2 = t + r1 * h, t + r2 * h
        u1 = x - s1.neg().exp() * (r1 * h).expm1() * eps
        eps_r1 = self.eps("eps_r1", u1, s1)
        u2 = (
            x
            - s2.neg().exp() * (r2 * h).expm1() * eps
            - s2.neg().exp() * (r2 / r1) * ((r2 * h).expm1() / (r2 * h) - 1) * (eps_r1 - eps)
        )
        eps_r2 = self.eps("eps_r2", u2, s2)
        sig_next = t_next.neg().exp()
        return x - sig_next * h.expm1() * eps - sig_next / r2 * (h.expm1() / h - 1) * (eps_r2 - eps)


def _ends(sigmas: Tensor) -> tuple[Tensor, Tensor]:
    """``(t_start, t_end)``: the first sigma and the last non-zero one, as ``-log sigma``."""
    last = sigmas[-1] if sigmas[-1] != 0 else sigmas[-2]
    return sigmas[0].log().neg(), last.log().neg()


def sample_dpm_fast(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    if len(sigmas) <= 1:
        return x
    t_start, t_end = _ends(sigmas)
    nfe = len(sigmas) - 1
    m = math.floor(nfe / 3) + 1
    ts = torch.linspace(float(t_start), float(t_end), m + 1, device=x.device)
    orders = [3] * (m - 2) + [2, 1] if nfe % 3 == 0 else [3] * (m - 1) + [nfe % 3]
    solver = _Solver(model, ctx)
    for i, order in enumerate(orders):
        t, t_next = ts[i], ts[i + 1]
        solver.first(x, t)
        if order == 1:
            x = solver.order_1(x, t, t_next)
        elif order == 2:
            x = solver.order_2(x, t, t_next)
        else:
            x = solver.order_3(x, t, t_next)
    return x


@dataclass
class _StepController:
    """An integral step-size controller (PID with only the I term, order 3)."""

    h: float
    order: float = 3.0
    accept_safety: float = 0.81
    eps: float = 1e-8
    errors: list[float] = field(default_factory=list)

    def propose(self, error: Tensor) -> bool:
        inv = 1 / (float(error) + self.eps)
        if not self.errors:
            self.errors = [inv, inv, inv]
        self.errors[0] = inv
        b1 = 1.0 / self.order
        factor = self.errors[0] ** b1 * self.errors[1] ** 0.0 * self.errors[2] ** 0.0
        factor = 1 + math.atan(factor - 1)
        accept = factor >= self.accept_safety
        if accept:
            self.errors[2], self.errors[1] = self.errors[1], self.errors[0]
        self.h *= factor
        return accept


def sample_dpm_adaptive(
    model: ModelFn,
    x: Tensor,
    sigmas: Tensor,
    ctx: SamplerContext,
    rtol: float = 0.05,
    atol: float = 0.0078,
    h_init: float = 0.05,
) -> Tensor:
    if len(sigmas) <= 1:
        return x
    t_start, t_end = _ends(sigmas)
    forward = bool(t_end > t_start)
    controller = _StepController(abs(h_init) * (1 if forward else -1))
    atol_t, rtol_t = torch.tensor(atol), torch.tensor(rtol)
    solver = _Solver(model, ctx)
    s, x_prev = t_start, x
    while bool(s < t_end - 1e-5) if forward else bool(s > t_end + 1e-5):
        t = torch.minimum(t_end, s + controller.h) if forward else torch.maximum(t_end, s + controller.h)
        solver.first(x, s)
        x_low = solver.order_2(x, s, t, r1=1 / 3)
        x_high = solver.order_3(x, s, t)
        delta = torch.maximum(atol_t, rtol_t * torch.maximum(x_low.abs(), x_prev.abs()))
        error = torch.linalg.norm((x_low - x_high) / delta) / x.numel() ** 0.5
        if controller.propose(error):
            x_prev, x, s = x_low, x_high, t
        if not math.isfinite(controller.h):  # a NaN estimate would never let the run end
            raise LoadoutError(
                "dpm_adaptive cannot choose its next step: the model's output is not a number",
                why="the step-size control needs a finite error estimate (NaN or infinity came back)",
                fix="pick another sampler, or a wider compute dtype (fp16 can overflow)",
                code="error",
            )
    return x
