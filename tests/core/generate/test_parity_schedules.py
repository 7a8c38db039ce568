"""diffusers' *default* flow schedules next to ComfyUI's (no networks): which ComfyUI scheduler each
one is, and where they part (docs/generate.md, "ComfyUI and diffusers")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.sampling import for_family, ksampler_sigmas

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

STEPS = 6


def test_sd3_default_schedule_is_comfyui_normal_not_simple() -> None:
    """diffusers' SD3 scheduler (shift 3, timesteps spaced evenly from the shifted table's ends,
    shifted once more) walks ComfyUI's ``normal`` sigmas, not ``simple``."""
    sched = diffusers.FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    sched.set_timesteps(STEPS)
    ms = for_family("sd3")
    normal = ksampler_sigmas(ms, "normal", "euler", STEPS)
    torch.testing.assert_close(sched.sigmas, normal, rtol=1e-5, atol=1e-6)
    simple = ksampler_sigmas(ms, "simple", "euler", STEPS)
    assert float((sched.sigmas - simple).abs().max()) > 0.1


@pytest.mark.parametrize(("size", "same"), [(1024, True), (512, False)])
def test_flux_dynamic_shift_meets_comfyui_only_at_4096_tokens(size: int, same: bool) -> None:
    """FLUX.1-dev's diffusers scheduler shifts by mu = 0.5 + 0.65 (tokens - 256) / 3840, ComfyUI's
    Flux-dev sampling by mu = 1.15 at every size (no ModelSamplingFlux node). At 1024x1024 (4096
    tokens) the two meet: diffusers' default sigmas are then ComfyUI's ``simple`` ones, up to the
    10000-point table ComfyUI picks them from; at 512x512 (mu 0.63) they are another schedule."""
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    sched = diffusers.FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=True, base_image_seq_len=256, max_image_seq_len=4096,
        base_shift=0.5, max_shift=1.15,
    )  # fmt: skip
    tokens = (size // 16) ** 2
    mu = calculate_shift(tokens, 256, 4096, 0.5, 1.15)
    sched.set_timesteps(sigmas=np.linspace(1.0, 1 / STEPS, STEPS), mu=mu)
    simple = ksampler_sigmas(for_family("flux-dev"), "simple", "euler", STEPS)
    gap = float((sched.sigmas - simple).abs().max())
    if same:
        assert mu == pytest.approx(1.15)
        assert gap < 1e-4
    else:
        assert gap > 0.05
