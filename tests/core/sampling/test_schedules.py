"""Schedulers and model sampling against ComfyUI (goldens: see ``toy.py`` for how they were made;
``comfy_schedules_more.json``, ComfyUI's ``KSampler(...).sigmas`` of the same commit for
ddim_uniform, linear_quadratic and kl_optimal, 1/2/4/13/30 steps): all nine schedulers for eps
(SD1), v (SD2-768), SD3 (flow, shift 3), Flux-dev (mu 1.15) and Flux-schnell (flow, shift 1,
multiplier 1), several step counts, full and partial denoise, with and without the dpm_2 / uni_pc
"discard the penultimate sigma" rule."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from core.errors import LoadoutError
from core.sampling import SAMPLERS, SCHEDULERS, for_family, ksampler_sigmas
from tests.core.sampling.toy import FAMILIES, assert_matches, load_golden

GOLDEN = load_golden("comfy_schedules.json")
MORE: list[dict[str, Any]] = load_golden("comfy_schedules_more.json")["schedules"]
SCHEDULES: list[dict[str, Any]] = GOLDEN["schedules"]


def _ms(name: str) -> Any:
    family, vpred, _, _ = FAMILIES[name]
    return for_family(family, v_prediction=vpred)


@pytest.mark.parametrize(
    "case",
    SCHEDULES + MORE,
    ids=[
        f"{c['family']}-{c['scheduler']}-{c['steps']}-{c['denoise']}-{c['sampler']}" for c in SCHEDULES + MORE
    ],
)
def test_sigmas_match_comfyui(case: dict[str, Any]) -> None:
    sigmas = ksampler_sigmas(
        _ms(case["family"]), case["scheduler"], case["sampler"], case["steps"], case["denoise"]
    )
    assert sigmas.dtype == torch.float32
    torch.testing.assert_close(sigmas, torch.tensor(case["sigmas"], dtype=torch.float32), rtol=1e-6, atol=0)


def test_every_scheduler_and_family_is_covered() -> None:
    more = MORE
    sigma_sets = {"ays_sd1", "ays_sdxl", "gits", "flux2"}  # test_sigma_sets.py, test_sized_schedules.py
    assert {c["scheduler"] for c in SCHEDULES + more} | sigma_sets == set(SCHEDULERS)
    assert {c["family"] for c in SCHEDULES} >= {"sd1", "sd2v", "sd3", "flux-dev", "flux-schnell"}
    assert {c["family"] for c in more} >= {"sd1", "sd2v", "sd3", "flux-dev", "flux-schnell"}


@pytest.mark.parametrize("name", sorted(GOLDEN["model_sampling"]))
def test_model_sampling_matches_comfyui(name: str) -> None:
    facts = GOLDEN["model_sampling"][name]
    ms = _ms(name)
    assert len(ms.sigmas) == facts["n"]
    assert float(ms.sigma_min) == pytest.approx(facts["sigma_min"], rel=1e-7)
    assert float(ms.sigma_max) == pytest.approx(facts["sigma_max"], rel=1e-7)
    assert_matches(ms.sigmas, facts["table_stats"], rel=1e-6)
    t = ms.timestep(torch.tensor(facts["probe"]))
    assert t.float().tolist() == pytest.approx(facts["timestep"], rel=1e-6)
    probes = [0.0, 10.5, 500.25, 999.0] if name in ("sd1", "sd2v") else None
    if probes is None:
        probes = [1.0, 250.0, 999.0] if name == "sd3" else [0.001, 0.3, 0.999]
    got = [float(ms.sigma(torch.tensor(v))) for v in probes]
    assert got == pytest.approx(facts["sigma_of_t"], rel=1e-6)
    pct = [ms.percent_to_sigma(p) for p in (0.0, 0.1, 0.5, 0.9, 1.0)]
    assert pct == pytest.approx(facts["percent_to_sigma"], rel=1e-6)

    x = torch.linspace(-1, 1, 32).view(2, 1, 4, 4)
    out = torch.cos(x * 3)
    sg = torch.tensor([0.7, 2.5])
    assert_matches(ms.calculate_input(sg, x), facts["calc_input"])
    assert_matches(ms.calculate_denoised(sg, out, x), facts["calc_denoised"])
    assert_matches(ms.noise_scaling(sg[1], out, x, max_denoise=True), facts["noise_scaling_max"])
    assert_matches(ms.noise_scaling(torch.tensor(0.6), out, x), facts["noise_scaling"])
    assert_matches(ms.inverse_noise_scaling(torch.tensor(0.25), x), facts["inverse_noise_scaling"])


def test_discard_penultimate_samplers_are_comfyuis() -> None:
    assert {n for n, s in SAMPLERS.items() if s.discard_penultimate_sigma} == {
        "dpm_2",
        "dpm_2_ancestral",
        "uni_pc",
        "uni_pc_bh2",
    }


def test_partial_denoise_is_the_tail_of_a_longer_schedule() -> None:
    ms = for_family("sd1")
    tail = ksampler_sigmas(ms, "karras", "euler", 10, 0.5)
    full = ksampler_sigmas(ms, "karras", "euler", 20)
    assert len(tail) == 11
    torch.testing.assert_close(tail, full[-11:], rtol=0, atol=0)
    assert len(ksampler_sigmas(ms, "normal", "euler", 10, 0.0)) == 0
    torch.testing.assert_close(
        ksampler_sigmas(ms, "normal", "euler", 7, 0.99995), ksampler_sigmas(ms, "normal", "euler", 7)
    )


def test_beta_may_return_fewer_sigmas_like_comfyui() -> None:
    # 1000 table entries and many steps: rounded Beta quantiles repeat and are dropped
    sigmas = ksampler_sigmas(for_family("sd1"), "beta", "euler", 900)
    assert len(sigmas) < 901
    assert bool((sigmas[:-1] > sigmas[1:]).all())


@pytest.mark.parametrize(
    ("scheduler", "sampler", "steps", "denoise"),
    [
        ("nope", "euler", 5, 1.0),
        ("normal", "nope", 5, 1.0),
        ("normal", "euler", 0, 1.0),
        ("normal", "euler", 5, 1.5),
    ],
)
def test_bad_settings_are_loadout_errors(scheduler: str, sampler: str, steps: int, denoise: float) -> None:
    with pytest.raises(LoadoutError) as info:
        ksampler_sigmas(for_family("sd1"), scheduler, sampler, steps, denoise)
    assert info.value.code == "bad_argument"
    assert info.value.fix


def test_family_errors() -> None:
    with pytest.raises(LoadoutError):
        for_family("wan2.1")
    with pytest.raises(LoadoutError):
        for_family("sd3", v_prediction=True)
    with pytest.raises(LoadoutError):
        for_family("sdxl", shift=2.0)
    assert for_family("sd3", shift=6.0).percent_to_sigma(0.5) == pytest.approx(6 * 0.5 / (1 + 5 * 0.5))
