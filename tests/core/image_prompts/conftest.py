"""Shared set-ups of the image-prompt tests, built once per test process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.generate.pipeline import Networks
from tests.core.image_prompts.ip_files import ip_adapter_file, unet_pair
from tests.core.image_prompts.sd_pipelines import sd15_pipeline
from tests.core.image_prompts.vision_files import save_transformers, vision_reference


@pytest.fixture(scope="session")
def sd15_plus_pipe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Networks, Path, Path]:
    """A whole SD1.5 set-up with an IP-Adapter plus: diffusers' StableDiffusionPipeline after
    ``load_ip_adapter`` (tiny UNet and VAE, 768-wide CLIP text, random weights), transformers' ViT-H
    tower at real width with 2 layers, Loadout's networks with the same weights, the adapter file
    and the tower's file. Tests set the pipeline's IP-Adapter scale they need."""
    root = tmp_path_factory.mktemp("ipa_pipe")
    pipe, nets = sd15_pipeline(root, *unet_pair(seed=2))
    tower = vision_reference(layers=2, seed=4)
    ip = ip_adapter_file(root / "ipadapter" / "ip-adapter-plus_sd15.safetensors", plus=True, seed=6)
    pipe.load_ip_adapter(str(ip.parent), subfolder="", weight_name=ip.name, image_encoder_folder=None)
    vision = save_transformers(tower, root / "clip_vision.safetensors")
    return pipe, tower, nets, ip, vision
