"""Every sampler x scheduler x family against ComfyUI's KSampler (golden numbers; how they were
produced: see ``tests/core/sampling/toy.py``). A full KSampler run each: initial noise from the
seed, noise scaling, CFG with batched cond/uncond, the sampler's own noise, inverse scaling and the
latent format, with a 2x4x8x8 (or 16-channel) latent."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from core.sampling import SamplingRequest, StepProgress, empty_latent, sample
from tests.core.sampling.toy import assert_matches, family_setup, image_latent, load_golden, toy_conditioning

CASES: list[dict[str, Any]] = load_golden("comfy_samplers.json")["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_comfyui(case: dict[str, Any]) -> None:
    ms, fmt, net = family_setup(case["family"])
    batch, channels = case["batch"], case["channels"]
    latent = empty_latent(batch, 64, 64, fmt) if case["latent"] == "empty" else image_latent(batch, channels)
    before = latent.clone()
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
    out = sample(net, ms, fmt, latent, positive, negative, request, progress=steps_seen.append)
    assert_matches(out, case["out"])
    assert torch.equal(latent, before)  # the caller's latent is never written
    assert len(steps_seen) == case["callbacks"]
    assert [p.step for p in steps_seen] == list(range(1, len(steps_seen) + 1))
