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
from core.sampling import for_family
from tests.core.generate.reference import discrete_comfy_schedule, to_unit_image

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def setup(sd15_plus_pipe: tuple[Any, Any, Networks, Path, Path]) -> tuple[Any, Any, Networks, Path, Path]:
    return sd15_plus_pipe  # conftest.py: shared with test_ip_adapter_batches.py


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
