"""The ``flux2`` schedule: ComfyUI's Flux2Scheduler numbers (goldens from its code), diffusers'
Flux2 pipelines' own sigmas (their empirical mu and exponential shift), and the sampler taking the
picture's size from the latent (FLUX.2's 1/16 latent; 1/8 for the others)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from core.detect.catalog import diffusion_spec
from core.detect.spec import FLUX2_LATENT
from core.errors import LoadoutError
from core.sampling.model_sampling import from_spec
from core.sampling.sigmas import ksampler_sigmas, scheduler_sigmas
from core.sampling.sized_schedules import empirical_mu, flux2

GOLDEN = json.loads((Path(__file__).parent / "golden_flux2_scheduler.json").read_text())
CASES = sorted(k for k in GOLDEN if not k.startswith("_"))


@pytest.mark.parametrize("case", CASES)
def test_flux2_sigmas_are_comfyuis(case: str) -> None:
    steps, width, height = (int(v) for v in case.split("x"))
    got = flux2(steps, width, height)
    assert got.dtype == torch.float32
    assert torch.equal(got, torch.tensor(GOLDEN[case], dtype=torch.float32))


@pytest.mark.parametrize(("steps", "size"), [(4, 1024), (28, 1024), (50, 512), (8, 2048)])
def test_flux2_sigmas_are_diffusers_flux2_pipelines(steps: int, size: int) -> None:
    import diffusers
    from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu

    tokens = (size // 16) ** 2  # the pipeline's packed latent tokens
    mu = compute_empirical_mu(tokens, steps)
    assert mu == empirical_mu(tokens, steps)
    scheduler = diffusers.FlowMatchEulerDiscreteScheduler(
        use_dynamic_shifting=True, time_shift_type="exponential"
    )
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
    ms = from_spec(diffusion_spec("flux2-klein-4b").sampling, "flux2-klein-4b")
    ours = scheduler_sigmas(ms, "flux2", steps, (size, size))
    torch.testing.assert_close(ours, scheduler.sigmas.float(), rtol=1e-6, atol=1e-6)


def test_the_schedule_needs_the_size_and_the_sampler_gives_it() -> None:
    ms = from_spec(diffusion_spec("flux2-klein-4b").sampling, "flux2-klein-4b")
    with pytest.raises(LoadoutError, match="needs the picture's size"):
        ksampler_sigmas(ms, "flux2", "euler", 4)
    assert torch.equal(ksampler_sigmas(ms, "flux2", "euler", 4, size=(1024, 1024)), flux2(4, 1024, 1024))
    half = ksampler_sigmas(ms, "flux2", "euler", 4, 0.5, size=(1024, 1024))
    assert torch.equal(half, flux2(8, 1024, 1024)[-5:])  # a partial denoise: the last steps of a longer run
    assert FLUX2_LATENT.downscale == 16  # the sampler's size: latent elements x the format's downscale
