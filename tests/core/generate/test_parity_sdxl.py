"""The whole SDXL path against diffusers' StableDiffusionXLPipeline (test-only reference).

Tiny real-architecture networks with random weights run in both: CLIP-L (no projection) and
OpenCLIP-G (with a text projection) from transformers, an SDXL-type UNet2DConditionModel (linear
transformer projections, ``addition_embed_type="text_time"`` with 256-wide size embeddings as the
released model has, so its class vector is pooled ++ 6 x 256 like the real 2816), and an SDXL-scaled
AutoencoderKL; ours are loaded from their state dicts. diffusers is set up the way ComfyUI computes
(docs/generate.md):

- ComfyUI's sigmas and nearest-index timesteps (``discrete_comfy_schedule``), ComfyUI's CPU noise;
- CLIP-L pads with its end token, CLIP-G with token 0 (ComfyUI's SDXLClipGTokenizer; diffusers'
  SDXL repos ship tokenizer_2 with pad "!" = 0 as well); both penultimate layers, un-normed;
- ComfyUI's CLIPTextEncode size defaults (width/height = the picture, crops 0, targets = the
  picture) are diffusers' ``add_time_ids`` with original size = target size = the picture and crops
  (0, 0), for the negative prompt too;
- the negative prompt is encoded, never zeroed: ``force_zeros_for_empty_prompt=False`` (diffusers'
  SDXL default replaces an *empty* negative prompt by zeros; ComfyUI encodes the empty string).
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
from core.models.vae import SDXL_LATENT
from core.sampling import for_family
from core.text.conditioning import SDXL_EMBED_DIM, TextEncoders
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

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]

L_WIDTH, G_WIDTH, G_PROJECTION = 32, 48, 40
CONTEXT = L_WIDTH + G_WIDTH
ADM = G_PROJECTION + 6 * SDXL_EMBED_DIM


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks]:
    tok_l = clip_tokenizer(tmp_path_factory.mktemp("clip_l"), pad_with_end=True)
    tok_g = clip_tokenizer(tmp_path_factory.mktemp("clip_g"), pad_with_end=False)
    hf_l, clip_l = clip_pair(L_WIDTH, act="quick_gelu", projection=None, seed=11)
    hf_g, clip_g = clip_pair(G_WIDTH, act="gelu", projection=G_PROJECTION, seed=12)
    torch.manual_seed(0)
    hf_unet = diffusers.UNet2DConditionModel(
        sample_size=8, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=CONTEXT, attention_head_dim=(2, 4), transformer_layers_per_block=(1, 2),
        use_linear_projection=True, addition_embed_type="text_time",
        addition_time_embed_dim=SDXL_EMBED_DIM, projection_class_embeddings_input_dim=ADM,
    )  # fmt: skip
    randomize(hf_unet, 13)
    unet_cfg = UNetConfig.per_level(
        model_channels=32, channel_mult=(1, 2), num_res_blocks=1, level_depth=(0, 2),
        transformer_depth_middle=2, context_dim=CONTEXT, num_head_channels=16,
        use_linear_in_transformer=True, adm_in_channels=ADM,
    )  # fmt: skip
    unet = UNetModel(unet_cfg).eval()
    unet.load_state_dict(unet_diffusers_to_original(hf_unet.state_dict(), unet_cfg), strict=True)
    hf_vae, vae = vae_pair(4, SDXL_LATENT, seed=14)
    pipe = diffusers.StableDiffusionXLPipeline(
        vae=hf_vae, text_encoder=hf_l, text_encoder_2=hf_g, tokenizer=tok_l, tokenizer_2=tok_g, unet=hf_unet,
        scheduler=discrete_scheduler("euler"), force_zeros_for_empty_prompt=False, add_watermarker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("sdxl", unet, TextEncoders(clip_l=clip_l, clip_g=clip_g), vae)


def _diffusers_image(pipe: Any, settings: ImageSettings) -> np.ndarray:
    s = settings.sampling
    pipe.scheduler = discrete_scheduler(s.sampler)
    size = (settings.height, settings.width)
    schedule = discrete_comfy_schedule(pipe.scheduler, for_family("sdxl"), s.sampler, s.scheduler, s.steps)
    with schedule as sigmas:
        noise = torch.randn(
            (settings.batch, 4, settings.height // 8, settings.width // 8),
            generator=torch.Generator("cpu").manual_seed(s.seed),
        )
        out = pipe(
            settings.prompt, negative_prompt=settings.negative, num_inference_steps=s.steps,
            guidance_scale=s.cfg, latents=noise, height=settings.height, width=settings.width,
            original_size=size, target_size=size, crops_coords_top_left=(0, 0),
            output_type="np", sigmas=sigmas,
        )  # fmt: skip
    return np.asarray(out.images)


@pytest.mark.parametrize(("sampler", "seed"), [("euler", 0), ("euler", 31337), ("dpmpp_2m", 5)])
def test_karras_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks], sampler: str, seed: int
) -> None:
    pipe, nets = pair
    # not square: height and width must land in the right places of the size embeddings
    settings = ImageSettings(
        prompt="a tiny red fox, forest", negative="blurry", width=64, height=80,
        sampling=Sampling(seed=seed, steps=5, cfg=5.0, sampler=sampler, scheduler="karras"),
    )  # fmt: skip
    pixels, _, _ = Pipeline(nets, Compute()).run(settings, Hooks())
    ours = to_unit_image(pixels)
    theirs = _diffusers_image(pipe, settings)
    err = float(np.abs(ours - theirs).max())
    print(f"sdxl {sampler} seed {seed}: max |ours - diffusers| = {err:.1e}")
    assert ours.shape == theirs.shape == (1, 80, 64, 3)
    assert err < 2e-5
    assert float(ours.std()) > 0.05


def test_size_conditioning_reaches_the_picture(pair: tuple[Any, Networks]) -> None:
    """The class vector is not inert in these tiny networks: swapping height and width in diffusers'
    time ids changes its picture well beyond the tolerance above (so the parity checks the order)."""
    pipe, _ = pair
    settings = ImageSettings(
        prompt="a tiny red fox", negative="blurry", width=64, height=80,
        sampling=Sampling(seed=0, steps=3, cfg=5.0, sampler="euler", scheduler="karras"),
    )  # fmt: skip
    right = _diffusers_image(pipe, settings)
    s = settings.sampling
    pipe.scheduler = discrete_scheduler("euler")
    with discrete_comfy_schedule(pipe.scheduler, for_family("sdxl"), "euler", "karras", 3) as sigmas:
        noise = torch.randn((1, 4, 10, 8), generator=torch.Generator("cpu").manual_seed(s.seed))
        swapped = pipe(
            settings.prompt, negative_prompt=settings.negative, num_inference_steps=3, guidance_scale=5.0,
            latents=noise, height=80, width=64, original_size=(64, 80), target_size=(64, 80),
            output_type="np", sigmas=sigmas,
        ).images  # fmt: skip
    assert float(np.abs(np.asarray(swapped) - right).max()) > 1e-3
