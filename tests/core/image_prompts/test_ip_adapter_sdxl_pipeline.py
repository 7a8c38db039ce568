"""A whole SDXL picture with ip-adapter_sdxl (the base layout reading ViT-bigG's 1280-wide image
embeds, 2048-wide keys and values) against diffusers' StableDiffusionXLPipeline with
``load_ip_adapter``: CLIP-L and OpenCLIP-G text towers at their real widths (768 + 1280 = SDXL's
2048 context, 1280-wide projection), the SDXL-width UNet with its size embeddings (class vector
2816 wide), ViT-bigG at real width with 1 layer, random weights; set up as ComfyUI computes
(``test_parity_sdxl``'s pads, size ids, sigmas and noise; the SD1.5 test's image embeddings: the
picture's ``image_embeds`` through ComfyUI's preprocessing, zeros for the negative as
ComfyUI_IPAdapter_plus gives a base adapter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.archs.clip_vision.preprocess import clip_preprocess
from core.generate.ip_adapter import AppliedIpAdapter, IpAdapterPass
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.image_encoder import load_image_encoder
from core.loading.ip_adapter import load_ip_adapter
from core.sampling import for_family
from tests.core.generate.reference import (
    discrete_comfy_schedule,
    to_unit_image,
)
from tests.core.image_prompts.ip_files import ip_adapter_file, sdxl_unet_pair
from tests.core.image_prompts.sd_pipelines import sdxl_pipeline
from tests.core.image_prompts.vision_files import VIT_BIGG, save_transformers, vision_reference

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Networks, Path, Path]:
    root = tmp_path_factory.mktemp("ipa_sdxl")
    pipe, nets = sdxl_pipeline(root, *sdxl_unet_pair(seed=3, sized=True))
    tower = vision_reference(layers=1, seed=5, widths=VIT_BIGG)
    ip = ip_adapter_file(
        root / "ipadapter" / "ip-adapter_sdxl.safetensors", plus=False, sdxl=True, embed=1280
    )
    pipe.load_ip_adapter(str(ip.parent), subfolder="", weight_name=ip.name, image_encoder_folder=None)
    vision = save_transformers(tower, root / "CLIP-ViT-bigG-14.safetensors")
    return pipe, tower, nets, ip, vision


def test_sdxl_ip_adapter_picture_equals_diffusers_set_up_as_comfyui(
    setup: tuple[Any, Any, Networks, Path, Path],
) -> None:
    pipe, tower, nets, ip, vision = setup
    rgb = np.random.default_rng(9).integers(0, 256, (56, 72, 3), dtype=np.uint8)
    weight, steps = 0.8, 3
    s = Sampling(seed=11, steps=steps, cfg=5.0, sampler="euler", scheduler="karras")
    # not square: the size ids must land in the right places beside the image prompt
    settings = ImageSettings(prompt="a tiny fox", negative="blurry", width=64, height=80, sampling=s)
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    encoder, adapter = load_image_encoder(vision), load_ip_adapter(ip)
    assert (encoder.family, adapter.family, adapter.encoder) == ("clip-vit-bigg", "sdxl", "clip-vit-bigg")
    applied = AppliedIpAdapter(adapter, encoder, rgb, weight, full)
    ours = to_unit_image(pipeline.run(settings, Hooks(), passes=[IpAdapterPass((applied,))])[0])
    plain = to_unit_image(Pipeline(nets, Compute()).run(settings, Hooks())[0])
    unit = torch.from_numpy(rgb).float().div(255).permute(2, 0, 1)[None]
    with torch.no_grad():
        pos = tower(pixel_values=clip_preprocess(unit)).image_embeds
    pipe.set_ip_adapter_scale(weight)
    with discrete_comfy_schedule(pipe.scheduler, for_family("sdxl"), "euler", "karras", steps) as sigmas:
        noise = torch.randn((1, 4, 10, 8), generator=torch.Generator("cpu").manual_seed(11))
        embeds = torch.cat([torch.zeros_like(pos), pos])[:, None]  # negative, positive
        theirs = pipe(
            "a tiny fox", negative_prompt="blurry", num_inference_steps=steps, guidance_scale=5.0,
            latents=noise, height=80, width=64, original_size=(80, 64), target_size=(80, 64),
            crops_coords_top_left=(0, 0), output_type="np", sigmas=sigmas, ip_adapter_image_embeds=[embeds],
        ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"ip-adapter sdxl weight {weight}: max |ours - diffusers| = {err:.1e}")
    assert ours.shape == (1, 80, 64, 3)
    assert err < 3 / 255
    assert float(np.abs(ours - plain).max()) > 1e-2  # the image prompt changed the picture
