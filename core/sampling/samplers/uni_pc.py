"""UniPC (Zhao et al. 2023), the multistep predictor-corrector with B(h) = h ("bh1", ComfyUI's
``uni_pc``) or B(h) = e^h - 1 ("bh2", ``uni_pc_bh2``), data prediction, order up to 3 with
lower orders at the start and the end.

ComfyUI runs it on a variance-preserving view of the Karras sigmas: ``x_vp = x / sqrt(1 +
sigma^2)``, ``alpha = 1 / sqrt(1 + sigma^2)``, and a final sigma of 0 is replaced by 0.001 (so the
result is divided by ``alpha(0.001)`` at the end). The model is asked for noise, converted back to
a data prediction through the same VP coefficients; this path is kept as is because its rounding
is what ComfyUI's images carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from core.sampling.samplers.base import ModelFn, SamplerContext

#: the sigma that stands for a final 0 (ComfyUI writes it into its sigma tensor)
FINAL_SIGMA = 0.001


def _log_mean_coeff(sigma: Tensor) -> Tensor:
    return 0.5 * torch.log(1 / ((sigma * sigma) + 1))


def _alpha(sigma: Tensor) -> Tensor:
    return torch.exp(_log_mean_coeff(sigma))


def _std(sigma: Tensor) -> Tensor:
    return torch.sqrt(1.0 - torch.exp(2.0 * _log_mean_coeff(sigma)))


def _lambda(sigma: Tensor) -> Tensor:
    lmc = _log_mean_coeff(sigma)
    return lmc - 0.5 * torch.log(1.0 - torch.exp(2.0 * lmc))


def _col(v: Tensor, ndim: int) -> Tensor:
    return v[(...,) + (None,) * (ndim - 1)]


@dataclass
class _UniPC:
    model: ModelFn
    variant: str  # "bh1" | "bh2"

    def data_prediction(self, x: Tensor, t: Tensor) -> Tensor:
        """x0 from the model's noise estimate at VP state ``x`` and sigmas ``t`` [B]."""
        s = t.view(t.shape[:1] + (1,) * (x.ndim - 1))
        x_in = x * ((s**2 + 1.0) ** 0.5)
        eps = (x_in - self.model(x_in, t)) / s
        return (x - _col(_std(t), x.ndim) * eps) / _col(_alpha(t), x.ndim)

    def update(
        self, x: Tensor, models: list[Tensor], times: list[Tensor], t: Tensor, order: int, corrector: bool
    ) -> tuple[Tensor, Tensor | None]:
        ndim = x.ndim
        t_prev, model_prev = times[-1], models[-1]
        lambda_prev, lambda_t = _lambda(t_prev), _lambda(t)
        sigma_prev, sigma_t = _std(t_prev), _std(t)
        alpha_t = torch.exp(_log_mean_coeff(t))
        h = lambda_t - lambda_prev

        rks: list[Tensor | float] = []
        d1s: list[Tensor] = []
        for i in range(1, order):
            rk = ((_lambda(times[-(i + 1)]) - lambda_prev) / h)[0]
            rks.append(rk)
            d1s.append((models[-(i + 1)] - model_prev) / rk)
        rks.append(1.0)
        rk_t = torch.tensor(rks, device=x.device)

        hh = -h[0]
        h_phi_1 = torch.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1
        b_h = hh if self.variant == "bh1" else torch.expm1(hh)
        rows, b = [], []
        factorial = 1
        for i in range(1, order + 1):
            rows.append(torch.pow(rk_t, i - 1))
            b.append(h_phi_k * factorial / b_h)
            factorial *= i + 1
            h_phi_k = h_phi_k / hh - 1 / factorial
        r_mat = torch.stack(rows)
        b_vec = torch.tensor(b, device=x.device)

        d1: Tensor | None = torch.stack(d1s, dim=1) if d1s else None
        x_lin = _col(sigma_t / sigma_prev, ndim) * x - _col(alpha_t * h_phi_1, ndim) * model_prev
        if d1 is not None:
            rhos_p = (
                torch.tensor([0.5], device=x.device)
                if order == 2
                else torch.linalg.solve(r_mat[:-1, :-1], b_vec[:-1])
            )
            x_t = x_lin - _col(alpha_t * b_h, ndim) * torch.tensordot(d1, rhos_p, dims=([1], [0]))
        else:
            x_t = x_lin - _col(alpha_t * b_h, ndim) * 0
        if not corrector:
            return x_t, None
        rhos_c = torch.tensor([0.5], device=x.device) if order == 1 else torch.linalg.solve(r_mat, b_vec)
        model_t = self.data_prediction(x_t, t)
        corr: Tensor | int = 0 if d1 is None else torch.tensordot(d1, rhos_c[:-1], dims=([1], [0]))
        x_t = x_lin - _col(alpha_t * b_h, ndim) * (corr + rhos_c[-1] * (model_t - model_prev))
        return x_t, model_t


def _sample(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext, variant: str) -> Tensor:
    times = sigmas.clone()
    if times[-1] == 0:
        times[-1] = FINAL_SIGMA
    x = x / torch.sqrt(1.0 + times[0] ** 2.0)
    solver = _UniPC(model, variant)
    steps = len(times) - 1
    order = min(3, len(times) - 2)
    batch = x.shape[0]

    def at(k: int) -> Tensor:
        return times[k].expand(batch)

    models: list[Tensor] = []
    stamps: list[Tensor] = []
    for step_index in range(steps):
        if step_index == 0:
            models, stamps = [solver.data_prediction(x, at(0))], [at(0)]
        elif step_index < order:
            x, model_x = solver.update(x, models, stamps, at(step_index), step_index, corrector=True)
            models.append(model_x if model_x is not None else solver.data_prediction(x, at(step_index)))
            stamps.append(at(step_index))
        else:
            last = step_index + (2 if step_index == steps - 1 else 1)
            for step in range(step_index, last):
                step_order = min(order, steps + 1 - step)
                x, model_x = solver.update(x, models, stamps, at(step), step_order, corrector=step != steps)
                models[:-1], stamps[:-1] = models[1:], stamps[1:]
                stamps[-1] = at(step)
                if step < steps:
                    models[-1] = model_x if model_x is not None else solver.data_prediction(x, at(step))
        ctx.report(step_index, models[-1])
    return x / _alpha(times[-1])


def sample_uni_pc(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _sample(model, x, sigmas, ctx, "bh1")


def sample_uni_pc_bh2(model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor:
    return _sample(model, x, sigmas, ctx, "bh2")
