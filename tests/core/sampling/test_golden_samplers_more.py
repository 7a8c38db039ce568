"""ComfyUI's other 31 KSampler samplers (everything in its ``SAMPLER_NAMES`` beyond the first
eleven) and its ddim_uniform / linear_quadratic / kl_optimal schedulers against ComfyUI's own
KSampler: the SD1 runs (CFG 7.5 and CFG 1, 1-3 steps, the new schedulers). Goldens:
``tests/fixtures/golden/comfy_samplers_more.json``; the other families' cases run in
``test_golden_samplers_families.py``.

How the goldens were made: ComfyUI at commit a125cd84b054a57729b5eecab930ca9408719832 (v0.3.64,
the same as ``comfy_samplers.json``, see ``toy.py``) was copied outside this repository and run on
the CPU in float32 (only its unrelated imports such as torchvision stubbed): a real
``comfy.model_base`` model of each family (``BaseModel`` SD1 eps / SD2 v, ``SDXL``, ``SD3``,
``Flux`` dev and schnell) whose diffusion network is the same ToyNet as :class:`toy.ToyNet`,
wrapped in ``ModelPatcher`` and run by ``comfy.sample.sample`` with the initial noise of
``comfy.sample.prepare_noise`` (as the KSampler node does), conditionings as
:func:`toy.toy_conditioning`. Cases: every new sampler x normal/karras on SD1 at CFG 7.5; every
one on SD2-v (simple), SD3 (simple), Flux-dev (beta, CFG 1) and SD1 at CFG 1; img2img at denoise
0.6 on SD1 and SD3; 1-3 step runs; the three new schedulers with several samplers on SD1 and SD3;
inpainting with a noise mask (``noise_mask``) for the CFG++ samplers, whose negative estimate
bypasses the mask.
The same harness reproduces every case of ``comfy_samplers.json`` to 1e-5. Only numbers are
kept; no ComfyUI code is in this repository.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from core.sampling import SamplingRequest, StepProgress, empty_latent, sample
from tests.core.sampling.toy import assert_matches, family_setup, image_latent, load_golden, toy_conditioning

ALL: list[dict[str, Any]] = load_golden("comfy_samplers_more.json")["cases"]
CASES = [c for c in ALL if c["family"] == "sd1" and c["latent"] == "empty"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_comfyui(case: dict[str, Any]) -> None:
    run_case(case)


def run_case(case: dict[str, Any]) -> None:
    ms, fmt, net = family_setup(case["family"])
    batch, channels = case["batch"], case["channels"]
    latent = empty_latent(batch, 64, 64, fmt) if case["latent"] == "empty" else image_latent(batch, channels)
    positive, negative = toy_conditioning(batch)
    steps_seen: list[StepProgress] = []
    request = SamplingRequest(
        seed=case["seed"],
        steps=case["steps"],
        cfg=case["cfg"],
        sampler=case["sampler"],
        scheduler=case["scheduler"],
        denoise=case["denoise"],
    )
    mask = None
    if case.get("mask"):  # SetLatentNoiseMask: 16x16, resized to the latent as ComfyUI does
        mask = (torch.rand(1, 16, 16, generator=torch.Generator().manual_seed(4)) > 0.5).float()
    out = sample(
        net, ms, fmt, latent, positive, negative, request, progress=steps_seen.append, denoise_mask=mask
    )
    assert_matches(out, case["out"])
    assert len(steps_seen) == case["callbacks"]
    assert [p.step for p in steps_seen] == list(range(1, len(steps_seen) + 1))
