"""The whole SD1 path against diffusers' StableDiffusionPipeline (test-only reference).

The same tiny real-architecture networks (random weights) run in both: diffusers' CLIPTextModel,
UNet2DConditionModel and AutoencoderKL, and ours loaded from their state dicts. diffusers is set
up the way ComfyUI computes, and each setting says which difference it removes (docs/generate.md):

- its scheduler walks ComfyUI's sigmas (karras, from core.sampling), and the UNet sees ComfyUI's
  timesteps: the *nearest* table index of each sigma (diffusers interpolates a fractional one);
- the initial latent is ComfyUI's noise, ``randn`` on a CPU generator seeded with the seed,
  handed to diffusers unscaled (it multiplies by ``init_noise_sigma`` = sqrt(1 + sigma_max^2),
  which is ComfyUI's "max denoise" scaling);
- text goes through transformers' CLIPTokenizer built from open_clip's vocabulary (ComfyUI's
  tokenizer), padded with the end token to 77, last layer after the final norm (SD1);
- euler runs diffusers' EulerDiscreteScheduler, dpmpp_2m its DPMSolverMultistepScheduler
  (dpmsolver++, order 2, midpoint, first-order last step): see ``discrete_scheduler``.

Pictures are compared as floats in [0, 1] before quantisation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.convert.unet_diffusers import unet_diffusers_to_original
from core.models.unet import UNetConfig, UNetModel
from core.models.vae import SD1_LATENT
from core.sampling import for_family
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import (
    clip_pair,
    clip_tokenizer,
    discrete_comfy_schedule,
    discrete_scheduler,
    randomize,
    to_unit_image,
    vae_pair,
)

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

# diffusers' schedulers call numpy's __array__ without copy= (numpy 2): not ours to fix
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]

WIDTH = 32  # CLIP width = cross-attention width


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks]:
    tokenizer = clip_tokenizer(tmp_path_factory.mktemp("clip_l"), pad_with_end=True)
    hf_clip, clip = clip_pair(WIDTH, act="quick_gelu", projection=None, seed=1)
    unet_cfg = UNetConfig(
        in_channels=4, out_channels=4, model_channels=32, channel_mult=(1, 2), num_res_blocks=(2, 2),
        transformer_depth=(1, 1, 0, 0), transformer_depth_middle=1,
        transformer_depth_output=(0, 0, 0, 1, 1, 1), context_dim=WIDTH, num_heads=2, num_head_channels=None,
    )  # fmt: skip
    torch.manual_seed(0)
    hf_unet = diffusers.UNet2DConditionModel(
        sample_size=8, block_out_channels=(32, 64), layers_per_block=2,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=WIDTH, attention_head_dim=2,
    )  # fmt: skip
    randomize(hf_unet, 2)
    unet = UNetModel(unet_cfg).eval()
    unet.load_state_dict(unet_diffusers_to_original(hf_unet.state_dict(), unet_cfg), strict=True)
    hf_vae, vae = vae_pair(4, SD1_LATENT, seed=3)
    pipe = diffusers.StableDiffusionPipeline(
        vae=hf_vae, text_encoder=hf_clip, tokenizer=tokenizer, unet=hf_unet,
        scheduler=discrete_scheduler("euler"), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("sd1", unet, TextEncoders(clip_l=clip), vae)


def _diffusers_image(pipe: Any, settings: ImageSettings) -> np.ndarray:
    s = settings.sampling
    pipe.scheduler = discrete_scheduler(s.sampler)
    schedule = discrete_comfy_schedule(pipe.scheduler, for_family("sd1"), s.sampler, s.scheduler, s.steps)
    with schedule as sigmas:
        noise = torch.randn(
            (settings.batch, 4, settings.height // 8, settings.width // 8),
            generator=torch.Generator("cpu").manual_seed(s.seed),
        )
        # "(red:1.0)" is ComfyUI's weighting syntax (weight 1: the plain word); diffusers reads text literally
        out = pipe(
            settings.prompt.replace("(red:1.0)", "red"), negative_prompt=settings.negative,
            num_inference_steps=s.steps,
            guidance_scale=s.cfg, latents=noise, height=settings.height, width=settings.width,
            output_type="np", sigmas=sigmas,
        )  # fmt: skip
    return np.asarray(out.images)


@pytest.mark.parametrize(
    ("sampler", "seed"), [("euler", 0), ("euler", 123456789), ("dpmpp_2m", 0), ("dpmpp_2m", 987654321)]
)
def test_karras_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks], sampler: str, seed: int
) -> None:
    pipe, nets = pair
    settings = ImageSettings(
        prompt="a tiny (red:1.0) fox, forest", negative="blurry", width=64, height=64, batch=1,
        sampling=Sampling(seed=seed, steps=6, cfg=6.0, sampler=sampler, scheduler="karras"),
    )  # fmt: skip
    pixels, timings, _ = Pipeline(nets, Compute()).run(settings, Hooks())
    ours = to_unit_image(pixels)
    theirs = _diffusers_image(pipe, settings)
    err = float(np.abs(ours - theirs).max())
    print(f"sd1 {sampler} seed {seed}: max |ours - diffusers| = {err:.1e}")
    assert ours.shape == theirs.shape == (1, 64, 64, 3)
    assert err < 2e-5
    assert float(ours.std()) > 0.05  # a picture, not a flat field
    assert len(timings.steps) == 6


def test_dpmpp_2m_differs_from_euler(pair: tuple[Any, Networks]) -> None:
    """The two samplers really run different solvers on the same sigmas (so each parity above
    proves its own solver, not a shared fallback)."""
    _, nets = pair
    images = []
    for sampler in ("euler", "dpmpp_2m"):
        settings = ImageSettings(
            prompt="a tiny fox", negative="blurry", width=64, height=64,
            sampling=Sampling(seed=0, steps=6, cfg=6.0, sampler=sampler, scheduler="karras"),
        )  # fmt: skip
        images.append(Pipeline(nets, Compute()).run(settings, Hooks())[0])
    assert float((images[0] - images[1]).abs().max()) > 1e-3
