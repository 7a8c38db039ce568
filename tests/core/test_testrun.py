"""The test run drives every diffusion network deterministically from one seed."""

from __future__ import annotations

import pytest
import torch

from core.errors import InterruptedByUser, LoadoutError, ModelMismatchError
from core.session.testrun import RunConfig, perform_test_run
from tests.fixtures.tiny_models import (
    TINY_CHROMA,
    TINY_FLUX,
    TINY_MMDIT,
    TINY_UNET_SD1,
    TINY_UNET_SDXL,
    TINY_VAE_4,
)

CASES = [TINY_UNET_SD1, TINY_UNET_SDXL, TINY_MMDIT, TINY_FLUX, TINY_CHROMA]


@pytest.mark.parametrize("tiny", CASES, ids=lambda t: t.name)
def test_runs_are_deterministic_per_seed(tiny) -> None:  # type: ignore[no-untyped-def]
    model = tiny.reference()
    cfg = RunConfig(steps=2, width=64, height=64, seed=7)
    steps: list[int] = []
    a = perform_test_run(model, cfg, progress=lambda s: steps.append(s.step))
    b = perform_test_run(model, cfg)
    c = perform_test_run(model, RunConfig(steps=2, width=64, height=64, seed=8))
    assert steps == [1, 2] and len(a.step_seconds) == 2 and a.seconds_per_step > 0
    sa, sb, sc = a.output_summary(), b.output_summary(), c.output_summary()
    assert sa == sb and sa["sha256"] != sc["sha256"]
    assert sa["shape"][0] == 1 and sa["shape"][2:] == [8, 8]
    assert torch.isfinite(a.output).all()


def test_batch_and_size_shape_the_latent() -> None:
    res = perform_test_run(TINY_UNET_SD1.reference(), RunConfig(steps=1, width=128, height=64, batch=2))
    assert res.output_summary()["shape"] == [2, 4, 8, 16]


def test_interrupt_between_steps_and_bad_settings() -> None:
    calls = {"n": 0}

    def check() -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise InterruptedByUser("stopped", why="you pressed stop")

    with pytest.raises(InterruptedByUser):
        perform_test_run(TINY_UNET_SD1.reference(), RunConfig(steps=3, width=64, height=64), check=check)
    with pytest.raises(LoadoutError) as err:
        RunConfig(steps=0, width=100)
    assert "steps" in err.value.message.lower() and "multiples of 8" in err.value.message
    with pytest.raises(ModelMismatchError):
        perform_test_run(TINY_VAE_4.reference(), RunConfig(steps=1, width=64, height=64))
