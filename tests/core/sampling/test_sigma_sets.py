"""Align Your Steps and GITS sigma sets against ComfyUI's ``AlignYourStepsScheduler`` and
``GITSScheduler`` nodes (goldens in ``comfy_schedules_more.json``: the nodes' ``execute`` at
commit a125cd84 for SD1/SDXL/SVD x 1/3/10/13/30 steps and GITS coefficients 0.80/1.05/1.20/1.50 x
2/5/10/20/21/40 steps, each at denoise 1, 0.45 and 0), and the schedulers built on them."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from core.errors import LoadoutError
from core.sampling import SamplingRequest, empty_latent, for_family, ksampler_sigmas, sample
from core.sampling.schedulers import kl_optimal
from core.sampling.sigma_sets import align_your_steps, gits
from tests.core.sampling.toy import family_setup, load_golden, toy_conditioning

GOLDEN = load_golden("comfy_schedules_more.json")
AYS: list[dict[str, Any]] = GOLDEN["align_your_steps"]
GITS: list[dict[str, Any]] = GOLDEN["gits"]


@pytest.mark.parametrize("case", AYS, ids=[f"{c['model_type']}-{c['steps']}-{c['denoise']}" for c in AYS])
def test_align_your_steps_matches_comfyui(case: dict[str, Any]) -> None:
    got = align_your_steps(case["model_type"], case["steps"], case["denoise"])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor(case["sigmas"], dtype=torch.float32), rtol=1e-6, atol=0)


@pytest.mark.parametrize("case", GITS, ids=[f"{c['coeff']}-{c['steps']}-{c['denoise']}" for c in GITS])
def test_gits_matches_comfyui(case: dict[str, Any]) -> None:
    got = gits(case["coeff"], case["steps"], case["denoise"])
    torch.testing.assert_close(got, torch.tensor(case["sigmas"], dtype=torch.float32), rtol=1e-6, atol=0)


def test_the_schedulers_are_the_nodes_at_full_denoise_with_ksamplers_rules() -> None:
    ms = for_family("sdxl")
    torch.testing.assert_close(ksampler_sigmas(ms, "ays_sdxl", "euler", 13), align_your_steps("SDXL", 13))
    torch.testing.assert_close(ksampler_sigmas(ms, "ays_sd1", "euler", 10), align_your_steps("SD1", 10))
    torch.testing.assert_close(ksampler_sigmas(ms, "gits", "euler", 12), gits(1.20, 12))
    # KSampler's denoise: int(steps / denoise) sigmas computed, the last steps + 1 kept
    torch.testing.assert_close(
        ksampler_sigmas(ms, "ays_sd1", "euler", 6, 0.5), align_your_steps("SD1", 12)[-7:]
    )
    # and its discarded penultimate sigma for dpm_2 / uni_pc
    full = align_your_steps("SD1", 9)
    torch.testing.assert_close(ksampler_sigmas(ms, "ays_sd1", "dpm_2", 8), torch.cat([full[:-2], full[-1:]]))


@pytest.mark.parametrize("family", ["sd3", "flux-dev", "pixart-sigma"])
@pytest.mark.parametrize("scheduler", ["ays_sd1", "ays_sdxl", "gits"])
def test_sigma_sets_refuse_models_they_were_not_made_for(family: str, scheduler: str) -> None:
    with pytest.raises(LoadoutError) as info:
        ksampler_sigmas(for_family(family), scheduler, "euler", 10)
    assert "14.61" in str(info.value.why) and "scheduler" in str(info.value.fix)


def test_gits_refuses_a_coefficient_or_step_count_it_has_no_set_for() -> None:
    for coeff, steps in ((1.23, 10), (1.6, 10), (1.2, 1)):
        with pytest.raises(LoadoutError) as info:
            gits(coeff, steps)
        assert "0.80 to 1.50" in str(info.value.why)


def test_kl_optimal_with_one_step_is_the_largest_sigma_not_nan() -> None:
    # ComfyUI divides 0 by 0 here and returns [nan, 0]; the limit is the table's largest sigma
    ms = for_family("sd1")
    got = kl_optimal(ms, 1)
    assert got[1] == 0 and math.isclose(float(got[0]), float(ms.sigma_max), rel_tol=1e-6)
    assert torch.equal(got[:1], kl_optimal(ms, 2)[:1])


def test_a_run_on_align_your_steps_makes_a_finite_latent() -> None:
    ms, fmt, net = family_setup("sd1")
    positive, negative = toy_conditioning(1)
    request = SamplingRequest(seed=3, steps=10, cfg=5.0, sampler="dpmpp_2m", scheduler="ays_sd1")
    out = sample(net, ms, fmt, empty_latent(1, 64, 64, fmt), positive, negative, request)
    assert bool(torch.isfinite(out).all()) and len(net.calls) == 10
