"""The SDXL refiner hand-off (two KSamplerAdvanced nodes) on tiny real networks (random weights)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.refiner import RefinerPass
from core.generate.request import ImageSettings, Sampling
from core.generate.workflow_request import RefinerUse
from core.models.unet import UNetConfig, UNetModel
from core.models.vae import SDXL_LATENT
from core.text.conditioning import SDXL_EMBED_DIM, TextEncoders
from tests.core.generate.reference import clip_pair, vae_pair
from tests.fixtures.tiny_models import random_state

L_WIDTH, G_WIDTH, G_PROJECTION = 32, 48, 40


def _unet(context: int, adm: int, seed: int) -> UNetModel:
    cfg = UNetConfig.per_level(
        model_channels=32, channel_mult=(1, 2), num_res_blocks=1, level_depth=(0, 1),
        transformer_depth_middle=1, context_dim=context, num_head_channels=16,
        use_linear_in_transformer=True, adm_in_channels=adm,
    )  # fmt: skip
    unet = UNetModel(cfg, device="meta")
    state = {k: v * (0.3 if k.startswith("out.") else 1.0) for k, v in random_state(unet, seed).items()}
    unet = UNetModel(cfg).eval()
    unet.load_state_dict(state, strict=True)
    return unet


@pytest.fixture(scope="module")
def nets() -> tuple[Networks, Networks]:
    _, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=11)
    _, clip_g = clip_pair(G_WIDTH, act="gelu", projection=G_PROJECTION, seed=12)
    _, vae = vae_pair(4, SDXL_LATENT, seed=14)
    base = _unet(L_WIDTH + G_WIDTH, G_PROJECTION + 6 * SDXL_EMBED_DIM, 13)
    refiner = _unet(G_WIDTH, G_PROJECTION + 5 * SDXL_EMBED_DIM, 15)
    return (
        Networks("sdxl", base, TextEncoders(clip_l=clip_l, clip_g=clip_g), vae),
        Networks("sdxl-refiner", refiner, TextEncoders(clip_g=clip_g), vae),
    )


def _settings(steps: int = 5) -> ImageSettings:
    return ImageSettings("a red fox", "blurry", Sampling(seed=4, steps=steps, cfg=5.0), 64, 64)


def test_handing_off_to_the_same_model_is_one_run(nets: tuple[Networks, Networks]) -> None:
    base, _ = nets
    settings = _settings()
    whole, _, _ = Pipeline(base, Compute()).run(settings, Hooks())
    twin = RefinerPass(Pipeline(base, Compute()), Hooks(), RefinerUse(Path("r"), 0.6))  # switch at step 3
    split, timings, _ = Pipeline(base, Compute()).run(settings, Hooks(), passes=[twin])
    assert torch.allclose(split, whole, atol=1e-5)  # only the latent scale's round trip differs
    assert len(timings.steps) == 5


def test_the_refiner_finishes_after_the_switch_step(nets: tuple[Networks, Networks]) -> None:
    base, refiner = nets
    settings = _settings()
    alone, _, _ = Pipeline(base, Compute()).run(settings, Hooks())
    seen: list[str] = []
    hooks = Hooks(place=lambda phase: seen.append(f"base {phase}"))
    rhooks = Hooks(place=lambda phase: seen.append(f"refiner {phase}"))
    switch = RefinerUse(Path("r.safetensors"), 0.6).switch_step(5)
    assert switch == 3
    refine = RefinerPass(Pipeline(refiner, Compute()), rhooks, RefinerUse(Path("r.safetensors"), 0.6))
    pixels, timings, _ = Pipeline(base, Compute()).run(settings, hooks, passes=[refine])
    assert pixels.shape == alone.shape and not torch.allclose(pixels, alone, atol=1e-3)
    assert len(timings.steps) == 5
    assert seen.index("refiner sample") > seen.index("base sample")  # base, then refiner, then decode
    assert seen[-1] == "base decode"


def test_switch_steps_keep_both_models_running() -> None:
    assert RefinerUse(Path("r"), 0.8).switch_step(20) == 16
    assert RefinerUse(Path("r"), 0.01).switch_step(20) == 1
    assert RefinerUse(Path("r"), 0.99).switch_step(20) == 19
    with pytest.raises(Exception, match="between 0 and 1"):
        RefinerUse(Path("r"), 1.0)
