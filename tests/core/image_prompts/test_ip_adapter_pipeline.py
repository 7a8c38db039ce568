"""A whole SD1.5 picture with an IP-Adapter plus against diffusers' StableDiffusionPipeline with
``load_ip_adapter`` (tiny UNet and VAE, 768-wide CLIP text and the ViT-H vision tower at real width
with 2 layers, random weights), set up as ComfyUI computes (``test_parity_controlnet_pipeline``'s
sigmas, noise and vocabulary). diffusers is handed the image embeddings ComfyUI computes
(``ip_adapter_image_embeds``): transformers' tower on ComfyUI's preprocessing of the picture, and of
an all-black picture for the negative (diffusers' own negative for plus zeroes normalised pixels)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.archs.clip_vision.preprocess import clip_preprocess
from core.generate.ip_adapter import EMPTY_SIZE, AppliedIpAdapter, IpAdapterPass
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.image_encoder import load_image_encoder
from core.loading.ip_adapter import load_ip_adapter
from core.models.vae import SD1_LATENT
from core.sampling import for_family
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import (
    clip_pair,
    clip_tokenizer,
    discrete_comfy_schedule,
    discrete_scheduler,
    to_unit_image,
    vae_pair,
)
from tests.core.image_prompts.ip_files import ip_adapter_file, unet_pair
from tests.core.image_prompts.vision_files import save_transformers, vision_reference

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Networks, Path, Path]:
    root = tmp_path_factory.mktemp("ipa_pipe")
    tokenizer = clip_tokenizer(root / "clip_l", pad_with_end=True)
    hf_clip, clip = clip_pair(768, act="quick_gelu", projection=None, seed=1)
    hf_unet, unet = unet_pair(seed=2)
    hf_vae, vae = vae_pair(4, SD1_LATENT, seed=3)
    tower = vision_reference(layers=2, seed=4)
    pipe = diffusers.StableDiffusionPipeline(
        vae=hf_vae, text_encoder=hf_clip, tokenizer=tokenizer, unet=hf_unet,
        scheduler=discrete_scheduler("euler"), safety_checker=None, feature_extractor=None,
        image_encoder=None, requires_safety_checker=False,
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    ip = ip_adapter_file(root / "ipadapter" / "ip-adapter-plus_sd15.safetensors", plus=True, seed=6)
    pipe.load_ip_adapter(str(ip.parent), subfolder="", weight_name=ip.name, image_encoder_folder=None)
    vision = save_transformers(tower, root / "clip_vision.safetensors")
    return pipe, tower, Networks("sd1", unet, TextEncoders(clip_l=clip), vae), ip, vision


@pytest.mark.parametrize("weight", [1.0, 0.6])
def test_ip_adapter_picture_equals_diffusers_set_up_as_comfyui(
    setup: tuple[Any, Any, Networks, Path, Path], weight: float
) -> None:
    pipe, tower, nets, ip, vision = setup
    rgb = np.random.default_rng(9).integers(0, 256, (72, 64, 3), dtype=np.uint8)
    s = Sampling(seed=11, steps=4, cfg=6.0, sampler="euler", scheduler="karras")
    settings = ImageSettings(prompt="a tiny fox", negative="blurry", width=64, height=64, sampling=s)
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    applied = AppliedIpAdapter(load_ip_adapter(ip), load_image_encoder(vision), rgb, weight, full)
    ours = to_unit_image(pipeline.run(settings, Hooks(), passes=[IpAdapterPass((applied,))])[0])
    plain = to_unit_image(Pipeline(nets, Compute()).run(settings, Hooks())[0])
    unit = torch.from_numpy(rgb).float().div(255).permute(2, 0, 1)[None]
    black = torch.zeros(1, 3, EMPTY_SIZE, EMPTY_SIZE)
    with torch.no_grad():
        pos, neg = (
            tower(pixel_values=clip_preprocess(p), output_hidden_states=True).hidden_states[-2]
            for p in (unit, black)
        )
    pipe.set_ip_adapter_scale(weight)
    with discrete_comfy_schedule(pipe.scheduler, for_family("sd1"), "euler", "karras", 4) as sigmas:
        noise = torch.randn((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(11))
        theirs = pipe(
            "a tiny fox", negative_prompt="blurry", num_inference_steps=4, guidance_scale=6.0, latents=noise,
            height=64, width=64, output_type="np", sigmas=sigmas,
            ip_adapter_image_embeds=[torch.cat([neg, pos])[:, None]],
        ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"ip-adapter plus weight {weight}: max |ours - diffusers| = {err:.1e}")
    assert err < 3 / 255
    assert float(np.abs(ours - plain).max()) > 1e-2  # the image prompt changed the picture
