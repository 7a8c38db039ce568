"""A whole SD1 + ControlNet run against diffusers' StableDiffusionControlNetPipeline (tiny networks,
random weights), set up as ComfyUI computes (the settings of ``test_parity_sd1``: ComfyUI's sigmas and
nearest-index timesteps, ComfyUI's noise, open_clip's vocabulary).

The hint is given at the picture's size in [0, 1], so diffusers' image processor leaves it as it is
and ComfyUI's resize is the identity; ControlNet start 0 / end 1 (diffusers keeps a ControlNet by
step fraction, ComfyUI by sigma: the same for the whole range)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from core.generate.controlnet import AppliedControlNet, ControlNetPass, ControlStack
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.controlnet import controlnet_diffusers_to_original
from core.loading.convert.unet_diffusers import unet_diffusers_to_original
from core.models.controlnet import ControlNetConfig, ControlNetModel
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

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]

WIDTH = 32
BLOCKS: dict[str, Any] = {
    "block_out_channels": (32, 64), "layers_per_block": 2,
    "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"), "cross_attention_dim": WIDTH,
    "attention_head_dim": 2,
}  # fmt: skip
UNET = UNetConfig(
    in_channels=4, out_channels=4, model_channels=32, channel_mult=(1, 2), num_res_blocks=(2, 2),
    transformer_depth=(1, 1, 0, 0), transformer_depth_middle=1,
    transformer_depth_output=(0, 0, 0, 1, 1, 1), context_dim=WIDTH, num_heads=2, num_head_channels=None,
)  # fmt: skip


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks, ControlNetModel]:
    tokenizer = clip_tokenizer(tmp_path_factory.mktemp("clip_l"), pad_with_end=True)
    hf_clip, clip = clip_pair(WIDTH, act="quick_gelu", projection=None, seed=1)
    torch.manual_seed(0)
    hf_unet = diffusers.UNet2DConditionModel(
        sample_size=8, up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **BLOCKS
    )
    randomize(hf_unet, 2)
    hf_cn = randomize(diffusers.ControlNetModel(**BLOCKS), 5)
    unet = UNetModel(UNET).eval()
    unet.load_state_dict(unet_diffusers_to_original(hf_unet.state_dict(), UNET), strict=True)
    control = ControlNetModel(ControlNetConfig(UNET)).eval()
    control.load_state_dict(controlnet_diffusers_to_original(hf_cn.state_dict(), control.config), strict=True)
    hf_vae, vae = vae_pair(4, SD1_LATENT, seed=3)
    pipe = diffusers.StableDiffusionControlNetPipeline(
        vae=hf_vae, text_encoder=hf_clip, tokenizer=tokenizer, unet=hf_unet, controlnet=hf_cn,
        scheduler=discrete_scheduler("euler"), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("sd1", unet, TextEncoders(clip_l=clip), vae), control


@pytest.mark.parametrize("strength", [1.0, 0.6])
def test_controlnet_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, ControlNetModel], strength: float
) -> None:
    pipe, nets, control = pair
    s = Sampling(seed=11, steps=5, cfg=6.0, sampler="euler", scheduler="karras")
    settings = ImageSettings(prompt="a tiny fox", negative="blurry", width=64, height=64, sampling=s)
    hint = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    controlnets = ControlNetPass(ControlStack([AppliedControlNet(control, hint, strength, full)]))
    ours = to_unit_image(pipeline.run(settings, Hooks(), passes=[controlnets])[0])
    plain = to_unit_image(Pipeline(nets, Compute()).run(settings, Hooks())[0])
    pipe.scheduler = discrete_scheduler("euler")
    with discrete_comfy_schedule(pipe.scheduler, for_family("sd1"), "euler", "karras", 5) as sigmas:
        noise = torch.randn((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(11))
        theirs = pipe(
            "a tiny fox", image=hint, negative_prompt="blurry", num_inference_steps=5, guidance_scale=6.0,
            latents=noise, height=64, width=64, output_type="np", sigmas=sigmas,
            controlnet_conditioning_scale=strength,
        ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"controlnet strength {strength}: max |ours - diffusers| = {err:.1e}")
    assert err < 2e-5
    assert float(np.abs(ours - plain).max()) > 1e-2  # the ControlNet changed the picture
