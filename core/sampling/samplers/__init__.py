"""The sampler registry: ComfyUI's KSampler names (all of ``SAMPLER_NAMES``) mapped to our
implementations, each with a line on what it is good for."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.errors import LoadoutError
from core.sampling.samplers import (
    ancestral,
    ancestral_2s,
    cfg_pp,
    dpm_solver,
    dpmpp,
    multistep,
    ode,
    res_multistep,
    sa_solver,
    sde,
    uni_pc,
)
from core.sampling.samplers.base import (
    ModelFn,
    SamplerContext,
    SamplerFn,
    SamplerOptions,
    SamplerSpec,
    UncondModelFn,
)


def _registry(*specs: SamplerSpec) -> Mapping[str, SamplerSpec]:
    table: dict[str, SamplerSpec] = {}
    for spec in specs:
        if spec.name in table:
            raise ValueError(f"sampler {spec.name!r} registered twice")
        table[spec.name] = spec
    return MappingProxyType(table)


def _s(
    name: str,
    fn: SamplerFn,
    summary: str,
    *,
    stochastic: bool = False,
    discard_penultimate_sigma: bool = False,
    final_sigma: float | None = None,
    needs_uncond: bool = False,
) -> SamplerSpec:
    return SamplerSpec(
        name,
        fn,
        stochastic=stochastic,
        discard_penultimate_sigma=discard_penultimate_sigma,
        final_sigma=final_sigma,
        needs_uncond=needs_uncond,
        summary=summary,
    )


# In ComfyUI's order (KSAMPLER_NAMES, then ddim, uni_pc, uni_pc_bh2).
SAMPLERS: Mapping[str, SamplerSpec] = _registry(
    _s("euler", ode.sample_euler, "first order, deterministic: the safe default, good at any step count"),
    _s("euler_cfg_pp", cfg_pp.sample_euler_cfg_pp, "Euler with CFG++: use CFG about 1-2", needs_uncond=True),
    _s(
        "euler_ancestral",
        ancestral.sample_euler_ancestral,
        "Euler plus fresh noise each step: varied, soft detail; does not converge",
        stochastic=True,
    ),
    _s(
        "euler_ancestral_cfg_pp",
        cfg_pp.sample_euler_ancestral_cfg_pp,
        "ancestral Euler with CFG++ (CFG about 1-2)",
        stochastic=True,
        needs_uncond=True,
    ),
    _s("heun", ode.sample_heun, "second order, two model calls a step: sharper than euler at the same steps"),
    _s("heunpp2", ode.sample_heunpp2, "Heun++: up to three model calls a step, third order"),
    _s(
        "dpm_2",
        ode.sample_dpm_2,
        "second order midpoint method, two calls a step",
        discard_penultimate_sigma=True,
    ),
    _s(
        "dpm_2_ancestral",
        ancestral_2s.sample_dpm_2_ancestral,
        "dpm_2 with fresh noise each step",
        stochastic=True,
        discard_penultimate_sigma=True,
    ),
    _s(
        "lms",
        multistep.sample_lms,
        "linear multistep (order 4), one call a step; can be unstable at few steps",
    ),
    _s(
        "dpm_fast",
        dpm_solver.sample_dpm_fast,
        "DPM-Solver order 3 on its own even grid (ignores the scheduler's inner sigmas)",
    ),
    _s(
        "dpm_adaptive",
        dpm_solver.sample_dpm_adaptive,
        "DPM-Solver-23 with error control: picks its own steps (ignores the step count)",
    ),
    _s(
        "dpmpp_2s_ancestral",
        ancestral_2s.sample_dpmpp_2s_ancestral,
        "DPM-Solver++(2S) with fresh noise: detailed, varied",
        stochastic=True,
    ),
    _s(
        "dpmpp_2s_ancestral_cfg_pp",
        cfg_pp.sample_dpmpp_2s_ancestral_cfg_pp,
        "dpmpp_2s_ancestral with CFG++ (CFG about 1-2)",
        stochastic=True,
        needs_uncond=True,
    ),
    _s(
        "dpmpp_sde",
        dpmpp.sample_dpmpp_sde,
        "DPM-Solver++ SDE, two calls a step: detailed at 10-20 steps",
        stochastic=True,
    ),
    _s(
        "dpmpp_sde_gpu",
        dpmpp.sample_dpmpp_sde_gpu,
        "dpmpp_sde with its Brownian noise drawn on the GPU",
        stochastic=True,
    ),
    _s(
        "dpmpp_2m",
        dpmpp.sample_dpmpp_2m,
        "DPM-Solver++(2M), one call a step: sharp, the usual pick at 20-30 steps",
    ),
    _s(
        "dpmpp_2m_cfg_pp",
        cfg_pp.sample_dpmpp_2m_cfg_pp,
        "dpmpp_2m with CFG++ (CFG about 1-2)",
        needs_uncond=True,
    ),
    _s(
        "dpmpp_2m_sde",
        dpmpp.sample_dpmpp_2m_sde,
        "dpmpp_2m with Brownian noise: more detail, needs more steps",
        stochastic=True,
    ),
    _s(
        "dpmpp_2m_sde_gpu",
        dpmpp.sample_dpmpp_2m_sde_gpu,
        "dpmpp_2m_sde with its Brownian noise drawn on the GPU",
        stochastic=True,
    ),
    _s(
        "dpmpp_2m_sde_heun",
        dpmpp.sample_dpmpp_2m_sde_heun,
        "dpmpp_2m_sde with the Heun correction instead of the midpoint",
        stochastic=True,
    ),
    _s(
        "dpmpp_2m_sde_heun_gpu",
        dpmpp.sample_dpmpp_2m_sde_heun_gpu,
        "dpmpp_2m_sde_heun with its Brownian noise drawn on the GPU",
        stochastic=True,
    ),
    _s(
        "dpmpp_3m_sde",
        sde.sample_dpmpp_3m_sde,
        "third-order multistep SDE: fine detail at 30+ steps",
        stochastic=True,
    ),
    _s(
        "dpmpp_3m_sde_gpu",
        sde.sample_dpmpp_3m_sde_gpu,
        "dpmpp_3m_sde with its Brownian noise drawn on the GPU",
        stochastic=True,
    ),
    _s("ddpm", sde.sample_ddpm, "the original DDPM posterior step: noisy, needs many steps", stochastic=True),
    _s("lcm", ancestral.sample_lcm, "for LCM/turbo/lightning models at 4-8 steps, CFG 1-2", stochastic=True),
    _s("ipndm", multistep.sample_ipndm, "improved PNDM (order 4), one call a step: good at 10-20 steps"),
    _s("ipndm_v", multistep.sample_ipndm_v, "ipndm with variable-step weights: better on uneven schedules"),
    _s("deis", multistep.sample_deis, "DEIS (order 3) exponential multistep: good at few steps"),
    _s(
        "res_multistep",
        res_multistep.sample_res_multistep,
        "second-order exponential multistep: sharp at few steps, Z-Image Turbo's default",
    ),
    _s(
        "res_multistep_cfg_pp",
        res_multistep.sample_res_multistep_cfg_pp,
        "res_multistep with CFG++ (CFG about 1-2)",
        needs_uncond=True,
    ),
    _s(
        "res_multistep_ancestral",
        res_multistep.sample_res_multistep_ancestral,
        "res_multistep with fresh noise each step",
        stochastic=True,
    ),
    _s(
        "res_multistep_ancestral_cfg_pp",
        res_multistep.sample_res_multistep_ancestral_cfg_pp,
        "ancestral res_multistep with CFG++",
        stochastic=True,
        needs_uncond=True,
    ),
    _s(
        "gradient_estimation",
        multistep.sample_gradient_estimation,
        "Euler with a gradient-estimation correction: cleaner at few steps",
    ),
    _s(
        "gradient_estimation_cfg_pp",
        multistep.sample_gradient_estimation_cfg_pp,
        "gradient_estimation with CFG++",
        needs_uncond=True,
    ),
    _s(
        "er_sde",
        sde.sample_er_sde,
        "extended reverse-time SDE, 3 stages: detailed, stable at 10-30 steps",
        stochastic=True,
    ),
    _s(
        "seeds_2",
        sde.sample_seeds_2,
        "SEEDS-2 stochastic exponential solver, two calls a step",
        stochastic=True,
    ),
    _s("seeds_3", sde.sample_seeds_3, "SEEDS-3, three calls a step", stochastic=True),
    _s(
        "sa_solver",
        sa_solver.sample_sa_solver,
        "stochastic Adams predictor-corrector, one call a step",
        stochastic=True,
    ),
    _s(
        "sa_solver_pece",
        sa_solver.sample_sa_solver_pece,
        "sa_solver that evaluates each corrected state (two calls a step)",
        stochastic=True,
    ),
    # ComfyUI's "ddim" is its euler sampler (the difference, fresh noise for masked inpainting,
    # does not arise without a mask).
    _s("ddim", ode.sample_euler, "ComfyUI's ddim: the euler update (DDIM with eta 0 on the sigma scale)"),
    _s(
        "uni_pc",
        uni_pc.sample_uni_pc,
        "UniPC predictor-corrector: strong at 5-15 steps",
        discard_penultimate_sigma=True,
        final_sigma=uni_pc.FINAL_SIGMA,
    ),
    _s(
        "uni_pc_bh2",
        uni_pc.sample_uni_pc_bh2,
        "UniPC with B(h) = e^h - 1: often better at very few steps",
        discard_penultimate_sigma=True,
        final_sigma=uni_pc.FINAL_SIGMA,
    ),
)


def get_sampler(name: str) -> SamplerSpec:
    spec = SAMPLERS.get(name)
    if spec is None:
        raise LoadoutError(
            f"unknown sampler {name!r}",
            why="samplers are named as in ComfyUI's KSampler",
            fix="use one of: " + ", ".join(SAMPLERS),
            code="bad_argument",
        )
    return spec


__all__ = [
    "SAMPLERS",
    "ModelFn",
    "SamplerContext",
    "SamplerFn",
    "SamplerOptions",
    "SamplerSpec",
    "UncondModelFn",
    "get_sampler",
]
