"""What SD1.5 does with ComfyUI_IPAdapter_plus's SDXL-minded weight types (style transfer precise:
the swap at both composition transformers, 4 at a quarter of the boost; style and composition
with one picture; "Mad Scientist" layer weights over SD1.5's 16 transformers), whole pictures
against diffusers' StableDiffusionPipeline with ``load_ip_adapter`` and per-block
``set_ip_adapter_scale`` dicts written by hand from the pack's source: a UNet with SD1.5's block
layout (16 transformers numbered as ComfyUI numbers them, few channels) at the real 768-wide
context, CLIP-L at real width, a base adapter and ViT-H at real width (1 layer). The swap is a
second copy of the adapter given the picture on both rows, masked to the negative row
(``test_ip_adapter_block_sdxl.py`` says why)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from core.archs.clip_vision.preprocess import clip_preprocess
from core.generate.ip_adapter import AppliedIpAdapter, IpAdapterPass
from core.generate.ip_weights import parse_layer_weights
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.request import ImageSettings, Sampling
from core.loading.image_encoder import load_image_encoder
from core.loading.ip_adapter import load_ip_adapter
from core.sampling import for_family
from tests.core.generate.reference import (
    discrete_comfy_schedule,
    to_unit_image,
)
from tests.core.image_prompts.ip_files import inner_widths, ip_adapter_file, layout_unet_pair
from tests.core.image_prompts.sd_pipelines import sd15_pipeline
from tests.core.image_prompts.vision_files import save_transformers, vision_reference

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]

W, WC, BOOST, STEPS = 0.8, 0.5, 1.3, 2
SETTINGS = ImageSettings(
    prompt="a tiny fox", negative="blurry", width=64, height=64,
    sampling=Sampling(seed=11, steps=STEPS, cfg=6.0, sampler="euler", scheduler="karras"),
)  # fmt: skip


def _scales(per_t: list[float]) -> dict[str, Any]:
    """SD1.5's 16 transformers (ComfyUI's forward order) as diffusers' per-block scale dict."""
    t = iter(per_t)
    down = {f"block_{b}": [next(t), next(t)] for b in range(3)}
    mid = next(t)
    return {"down": down, "mid": mid, "up": {f"block_{b}": [next(t) for _ in range(3)] for b in (1, 2, 3)}}


STYLE = [W, W, W, W, 0, 0, 0, 0, 0, W, W, W, W, W, W, W]
#: kind: (our arguments, diffusers' scales of the adapter and of its swapped copy)
KINDS: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "style transfer precise": (
        {"weight_type": "style transfer precise", "boost": BOOST},
        [_scales(STYLE), _scales([0, 0, 0, 0, BOOST * 0.25, BOOST] + [0] * 10)]),
    "style and composition, one picture": (
        {"weight_type": "style and composition", "composition_weight": WC},
        [_scales([*STYLE[:4], WC * 0.25, WC, *STYLE[6:]]), _scales([0.0] * 16)]),
    "layer weights 0:1, 5:0.5, 15:2": (
        {"weight_type": "ease in", "layer_weights": parse_layer_weights("0:1, 5:0.5, 15:2")},
        [_scales([W] + [0] * 4 + [0.5 * W] + [0] * 9 + [2 * W]), _scales([0.0] * 16)]),
}  # fmt: skip


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Networks, Path, Path, np.ndarray]:
    root = tmp_path_factory.mktemp("ipa_blocks_sd15")
    hf_unet, unet = layout_unet_pair(False, seed=2)
    pipe, nets = sd15_pipeline(root, hf_unet, unet)
    tower = vision_reference(layers=1, seed=4)
    name = "ip-adapter_sd15.safetensors"
    ip = ip_adapter_file(root / "ipadapter" / name, plus=False, seed=6, inners=inner_widths(unet))
    folder = str(ip.parent)
    pipe.load_ip_adapter([folder] * 2, subfolder=[""] * 2, weight_name=[name] * 2, image_encoder_folder=None)
    vision = save_transformers(tower, root / "clip_vision.safetensors")
    plain = to_unit_image(Pipeline(nets, Compute()).run(SETTINGS, Hooks())[0])  # no image prompt
    return pipe, tower, nets, ip, vision, plain


@pytest.mark.parametrize("kind", list(KINDS))
def test_sdxl_minded_types_on_sd15_equal_diffusers_per_block_scales(
    setup: tuple[Any, Any, Networks, Path, Path, np.ndarray], kind: str
) -> None:
    pipe, tower, nets, ip, vision, plain = setup
    args, scales = KINDS[kind]
    rgb = np.random.default_rng(9).integers(0, 256, (72, 64, 3), dtype=np.uint8)
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    applied = AppliedIpAdapter(load_ip_adapter(ip), load_image_encoder(vision), rgb, W, full, **args)
    ours = to_unit_image(pipeline.run(SETTINGS, Hooks(), passes=[IpAdapterPass((applied,))])[0])
    with torch.no_grad():
        unit = torch.from_numpy(rgb).float().div(255).permute(2, 0, 1)[None]
        pos = tower(pixel_values=clip_preprocess(unit)).image_embeds
    first, swapped = torch.cat([torch.zeros_like(pos), pos])[:, None], torch.cat([pos, pos])[:, None]
    negative_row_only = torch.cat([torch.ones(1, 1, 8, 8), torch.zeros(1, 1, 8, 8)])
    pipe.set_ip_adapter_scale(scales)
    with discrete_comfy_schedule(pipe.scheduler, for_family("sd1"), "euler", "karras", STEPS) as sigmas:
        noise = torch.randn((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(11))
        theirs = pipe(
            "a tiny fox", negative_prompt="blurry", num_inference_steps=STEPS, guidance_scale=6.0,
            latents=noise, height=64, width=64, output_type="np", sigmas=sigmas,
            ip_adapter_image_embeds=[first, swapped],
            cross_attention_kwargs={"ip_adapter_masks": [None, negative_row_only]},
        ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"sd1.5 {kind}: max |ours - diffusers| = {err:.1e}")
    assert err < 3 / 255
    assert float(np.abs(ours - plain).max()) > 1e-2  # the image prompt reached the picture
