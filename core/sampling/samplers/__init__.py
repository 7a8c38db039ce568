"""The sampler registry: ComfyUI's KSampler names mapped to our implementations."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from core.errors import LoadoutError
from core.sampling.samplers.ancestral import sample_euler_ancestral, sample_lcm
from core.sampling.samplers.base import (
    ModelFn,
    SamplerContext,
    SamplerFn,
    SamplerOptions,
    SamplerSpec,
)
from core.sampling.samplers.dpmpp import sample_dpmpp_2m, sample_dpmpp_2m_sde, sample_dpmpp_sde
from core.sampling.samplers.ode import sample_dpm_2, sample_euler, sample_heun
from core.sampling.samplers.uni_pc import FINAL_SIGMA, sample_uni_pc, sample_uni_pc_bh2


def _registry(*specs: SamplerSpec) -> Mapping[str, SamplerSpec]:
    table: dict[str, SamplerSpec] = {}
    for spec in specs:
        if spec.name in table:
            raise ValueError(f"sampler {spec.name!r} registered twice")
        table[spec.name] = spec
    return MappingProxyType(table)


SAMPLERS: Mapping[str, SamplerSpec] = _registry(
    SamplerSpec("euler", sample_euler),
    SamplerSpec("euler_ancestral", sample_euler_ancestral, stochastic=True),
    SamplerSpec("heun", sample_heun),
    SamplerSpec("dpm_2", sample_dpm_2, discard_penultimate_sigma=True),
    SamplerSpec("dpmpp_2m", sample_dpmpp_2m),
    SamplerSpec("dpmpp_2m_sde", sample_dpmpp_2m_sde, stochastic=True),
    SamplerSpec("dpmpp_sde", sample_dpmpp_sde, stochastic=True),
    SamplerSpec("lcm", sample_lcm, stochastic=True),
    # ComfyUI's "ddim" is its euler sampler (the difference, fresh noise for masked inpainting,
    # does not arise without a mask).
    SamplerSpec("ddim", sample_euler),
    SamplerSpec("uni_pc", sample_uni_pc, discard_penultimate_sigma=True, final_sigma=FINAL_SIGMA),
    SamplerSpec("uni_pc_bh2", sample_uni_pc_bh2, discard_penultimate_sigma=True, final_sigma=FINAL_SIGMA),
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
    "get_sampler",
]
