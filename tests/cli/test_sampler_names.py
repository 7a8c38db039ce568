"""Every sampler and scheduler name ComfyUI's KSampler offers is accepted, by the engine and by
``loadout generate``, from the one registry; a name ComfyUI does not have is refused in words.

The names are ComfyUI's ``comfy.samplers.SAMPLER_NAMES`` and ``SCHEDULER_NAMES`` at commit
a125cd84b054a57729b5eecab930ca9408719832 (v0.3.64), the commit the sampling goldens come from."""

from __future__ import annotations

import pytest

from app.cli import build_parser
from core.errors import LoadoutError
from core.generate.parameters import SAMPLER_LABELS, SCHEDULER_LABELS, parse_parameters
from core.sampling import SAMPLERS, SCHEDULERS, SamplingRequest
from core.sampling.schedulers import COMFY_SCHEDULERS

COMFY_SAMPLER_NAMES = (
    "euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2", "dpm_2",
    "dpm_2_ancestral", "lms", "dpm_fast", "dpm_adaptive", "dpmpp_2s_ancestral", "dpmpp_2s_ancestral_cfg_pp",
    "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp", "dpmpp_2m_sde", "dpmpp_2m_sde_gpu",
    "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu", "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm", "lcm",
    "ipndm", "ipndm_v", "deis", "res_multistep", "res_multistep_cfg_pp", "res_multistep_ancestral",
    "res_multistep_ancestral_cfg_pp", "gradient_estimation", "gradient_estimation_cfg_pp", "er_sde",
    "seeds_2", "seeds_3", "sa_solver", "sa_solver_pece", "ddim", "uni_pc", "uni_pc_bh2",
)  # fmt: skip
COMFY_SCHEDULER_NAMES = (
    "simple", "sgm_uniform", "karras", "exponential", "ddim_uniform", "beta", "normal",
    "linear_quadratic", "kl_optimal",
)  # fmt: skip
#: Loadout's own schedulers (ComfyUI has them as separate nodes): docs/sampling.md says so
EXTRA_SCHEDULERS = ("ays_sd1", "ays_sdxl", "gits", "flux2")


def _generate(*extra: str) -> list[str]:
    return ["generate", "m.safetensors", "--prompt", "p", "-o", "out.png", *extra]


def test_the_registries_are_comfyuis_lists() -> None:
    assert tuple(SAMPLERS) == COMFY_SAMPLER_NAMES  # ComfyUI's order, nothing missing or extra
    assert set(SCHEDULERS) == set(COMFY_SCHEDULER_NAMES) | set(EXTRA_SCHEDULERS)
    assert set(COMFY_SCHEDULERS) == set(COMFY_SCHEDULER_NAMES)
    assert all(spec.summary for spec in SAMPLERS.values())


@pytest.mark.parametrize("name", COMFY_SAMPLER_NAMES)
def test_every_comfyui_sampler_is_accepted(name: str) -> None:
    assert SamplingRequest(seed=1, sampler=name).sampler == name
    assert build_parser().parse_args(_generate("--sampler", name)).sampler == name


@pytest.mark.parametrize("name", COMFY_SCHEDULER_NAMES + EXTRA_SCHEDULERS)
def test_every_scheduler_is_accepted(name: str) -> None:
    assert SamplingRequest(seed=1, scheduler=name).scheduler == name
    assert build_parser().parse_args(_generate("--scheduler", name)).scheduler == name


@pytest.mark.parametrize(("option", "name"), [("sampler", "dpm_fast_gpu"), ("scheduler", "align_your_steps")])
def test_a_name_comfyui_does_not_have_is_refused_in_words(
    option: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(LoadoutError) as info:
        SamplingRequest(seed=1, **{option: name})
    assert f"unknown {option} '{name}'" in info.value.message
    listed = "res_multistep" if option == "sampler" else "kl_optimal"
    assert "named as in ComfyUI" in str(info.value.why) and listed in str(info.value.fix)
    with pytest.raises(SystemExit):
        build_parser().parse_args(_generate(f"--{option}", name))
    err = capsys.readouterr().err
    assert f"invalid choice: '{name}'" in err and listed in err


def test_every_a1111_label_names_a_sampler_the_engine_runs() -> None:
    """A picture's ``Sampler``/``Schedule type`` text (A1111's spellings) is read back to one of
    the registries' names, never to one the engine refuses."""
    assert set(SAMPLER_LABELS) <= set(SAMPLERS) and set(SCHEDULER_LABELS) <= set(SCHEDULERS)
    for label, name in (("DPM++ 3M SDE", "dpmpp_3m_sde"), ("LMS", "lms"), ("DPM2 a", "dpm_2_ancestral")):
        text = f"a fox\nSteps: 9, Sampler: {label}, Schedule type: KL Optimal, CFG scale: 5, Seed: 1"
        p = parse_parameters(text + ", Size: 64x64")
        assert (p.sampler, p.scheduler) == (name, "kl_optimal")
