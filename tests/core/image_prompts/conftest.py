"""Shared set-ups of the image-prompt tests, built once per test process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.generate.pipeline import Networks
from core.models.vae import SD1_LATENT
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import clip_pair, clip_tokenizer, discrete_scheduler, vae_pair
from tests.core.image_prompts.ip_files import ip_adapter_file, unet_pair
from tests.core.image_prompts.vision_files import save_transformers, vision_reference


@pytest.fixture(scope="session")
def sd15_plus_pipe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Networks, Path, Path]:
    """A whole SD1.5 set-up with an IP-Adapter plus: diffusers' StableDiffusionPipeline after
    ``load_ip_adapter`` (tiny UNet and VAE, 768-wide CLIP text, random weights), transformers' ViT-H
    tower at real width with 2 layers, Loadout's networks with the same weights, the adapter file
    and the tower's file. Tests set the pipeline's IP-Adapter scale they need."""
    import diffusers

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
