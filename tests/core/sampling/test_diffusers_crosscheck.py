"""Cross-check of the solver math with diffusers' schedulers (an independent implementation).

Each diffusers scheduler is configured as SD1 (scaled-linear betas 0.00085..0.012, 1000 steps,
epsilon prediction, Karras sigmas) and run on a toy epsilon network; our sampler runs on the same
sigmas (read back from the diffusers scheduler) with the same network seen as a denoiser,
``denoised = x - sigma * eps(x / sqrt(1 + sigma^2), sigma)``. The network is fed sigma rather than
a timestep because the two libraries map sigma to timestep differently (ComfyUI: nearest integer
table index; diffusers: interpolated) -- that and the other differences are listed in
``docs/sampling.md``. Our sigmas themselves are ComfyUI's (``test_schedules.py``); here the Karras
ends of the two libraries are also compared.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from diffusers import (
    DPMSolverMultistepScheduler,
    EulerAncestralDiscreteScheduler,
    EulerDiscreteScheduler,
    HeunDiscreteScheduler,
    KDPM2DiscreteScheduler,
    LMSDiscreteScheduler,
)
from torch import Tensor

from core.sampling import SamplerOptions, for_family, get_sampler, ksampler_sigmas
from core.sampling.samplers import SamplerContext

# diffusers' schedulers call numpy's __array__ without copy= (numpy 2): not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SD1 = {
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "num_train_timesteps": 1000,
}
STEPS = 8
SEED = 1234


def eps_net(x_in: Tensor, sigma: Tensor) -> Tensor:
    s = sigma.reshape(-1, 1, 1, 1) if sigma.ndim else sigma
    return 0.6 * x_in + 0.3 * torch.tanh(2.0 * x_in) + 0.02 * torch.log(s) * x_in


def k_model(x: Tensor, sigma: Tensor) -> Tensor:
    s = sigma.reshape(-1, 1, 1, 1)
    return x - s * eps_net(x / torch.sqrt(1 + s * s), sigma)


def start_latent(sigma0: Tensor) -> Tensor:
    noise = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    return noise * torch.sqrt(1 + sigma0.double() ** 2)


def ours(sampler: str, sigmas: Tensor, x: Tensor) -> Tensor:
    ctx = SamplerContext(for_family("sd1"), SEED, SamplerOptions(), lambda i, d: None)
    return get_sampler(sampler).fn(k_model, x, sigmas, ctx)


def run_diffusers(
    scheduler: Any, x: Tensor, sigma_of: Any, generator: torch.Generator | None = None
) -> Tensor:
    for t in scheduler.timesteps:
        x_in = scheduler.scale_model_input(x, t)
        eps = eps_net(x_in, sigma_of(scheduler))
        kwargs = {"generator": generator} if generator is not None else {}
        x = scheduler.step(eps, t, x, **kwargs).prev_sample
    return x


def current_sigma(scheduler: Any) -> Tensor:
    index = 0 if scheduler.step_index is None else scheduler.step_index  # DPM-Solver sets it in step()
    return scheduler.sigmas[index].to(torch.float64)


def kdpm2_sigma(scheduler: Any) -> Tensor:
    table = scheduler.sigmas if scheduler.state_in_first_order else scheduler.sigmas_interpol
    return table[scheduler.step_index].to(torch.float64)


def _double(scheduler: Any) -> Any:
    for name in ("sigmas", "sigmas_interpol"):
        if getattr(scheduler, name, None) is not None:
            setattr(scheduler, name, getattr(scheduler, name).to(torch.float64))
    return scheduler


def test_karras_sigmas_agree_with_comfyui_to_float32_table_rounding() -> None:
    sched = EulerDiscreteScheduler(**SD1, use_karras_sigmas=True)
    sched.set_timesteps(STEPS)
    ref = ksampler_sigmas(for_family("sd1"), "karras", "euler", STEPS)
    # diffusers builds its sigma table from float32 alphas_cumprod, ComfyUI from float64: the
    # ends differ in the 5th-6th significant digit, the shape of the schedule is the same
    torch.testing.assert_close(sched.sigmas.float(), ref, rtol=3e-5, atol=0)
    assert not torch.equal(sched.sigmas.float(), ref)


@pytest.mark.parametrize(
    ("sampler", "cls", "sigma_of"),
    [
        ("euler", EulerDiscreteScheduler, current_sigma),
        ("heun", HeunDiscreteScheduler, current_sigma),
        ("dpm_2", KDPM2DiscreteScheduler, kdpm2_sigma),
        ("dpmpp_2m", DPMSolverMultistepScheduler, current_sigma),
    ],
)
def test_deterministic_samplers_agree_with_diffusers(sampler: str, cls: Any, sigma_of: Any) -> None:
    extra = {"algorithm_type": "dpmsolver++", "solver_order": 2} if cls is DPMSolverMultistepScheduler else {}
    sched = _double(cls(**SD1, use_karras_sigmas=True, **extra))
    sched.set_timesteps(STEPS)
    _double(sched)
    sigmas = torch.unique_consecutive(sched.sigmas.to(torch.float64))
    x0 = start_latent(sigmas[0])
    # DPM-Solver keeps its state on the variance-preserving scale: x / sqrt(1 + sigma^2)
    vp = cls is DPMSolverMultistepScheduler
    theirs = run_diffusers(sched, x0 / torch.sqrt(1 + sigmas[0] ** 2) if vp else x0.clone(), sigma_of)
    mine = ours(sampler, sigmas, x0.clone())
    # diffusers' Euler upcasts to float32 internally; everything else is float64 on both sides
    torch.testing.assert_close(mine, theirs.to(mine.dtype), rtol=1e-5, atol=1e-5)
    assert float((mine - x0).abs().mean()) > 0.1  # the run really moved the latent


def test_euler_ancestral_agrees_with_diffusers_with_the_same_generator() -> None:
    sched = _double(EulerAncestralDiscreteScheduler(**SD1, timestep_spacing="linspace"))
    sched.set_timesteps(STEPS)
    _double(sched)
    sigmas = sched.sigmas.to(torch.float64)
    x0 = start_latent(sigmas[0])
    # diffusers draws each step's noise from the generator it is given, ComfyUI from a generator
    # seeded with the run's seed: the same stream when both are seeded alike (float32 draws)
    theirs = run_diffusers(sched, x0.clone().float(), current_sigma, torch.Generator().manual_seed(SEED))
    mine = ours("euler_ancestral", sigmas.float(), x0.clone().float())
    torch.testing.assert_close(mine, theirs.float(), rtol=1e-5, atol=1e-5)


def test_lms_agrees_with_diffusers_before_the_final_denoising_step() -> None:
    """diffusers' LMSDiscreteScheduler integrates the order-4 Lagrange polynomials with
    ``scipy.integrate.quad``, ours exactly. Its last step to sigma 0 integrates too, where
    ComfyUI's lms jumps to the denoised estimate, so the runs are compared one step before it."""
    sched = _double(LMSDiscreteScheduler(**SD1, use_karras_sigmas=True))
    sched.set_timesteps(STEPS)
    _double(sched)
    sigmas = sched.sigmas.to(torch.float64)
    x = x0 = start_latent(sigmas[0])
    for t in sched.timesteps[:-1]:
        x = sched.step(eps_net(sched.scale_model_input(x, t), current_sigma(sched)), t, x).prev_sample
    mine = ours("lms", sigmas[:-1], x0.clone())
    torch.testing.assert_close(mine, x.to(mine.dtype), rtol=1e-6, atol=1e-6)
    assert float((mine - x0).abs().mean()) > 0.1
