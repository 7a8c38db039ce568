"""Whole SDXL pictures with ComfyUI_IPAdapter_plus's block weight types (style and composition with
two pictures, strong style and composition, style transfer precise, composition precise, "Mad
Scientist" layer weights) against diffusers' StableDiffusionXLPipeline with ``load_ip_adapter``
and per-block scales (``set_ip_adapter_scale`` with InstantStyle's dicts, written here by hand
from the pack's source): a UNet with SDXL's block layout (11 transformers numbered as ComfyUI
numbers them, one transformer block each, few channels) at the real 2048-wide context, CLIP-L
and OpenCLIP-G at real width, an ip-adapter_sdxl_vit-h file and ViT-H at real width (1 layer).

What diffusers cannot say in one adapter is said with the same file loaded twice: the composition
picture is the second adapter's picture; the precise types' swap (at those transformers the
negative rows read the picture and the positive rows zero tokens, whose attention is 0) is the
second adapter given the picture on both rows with an ``ip_adapter_masks`` of ones on the
negative row and zeros on the positive one."""

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
from tests.core.image_prompts.sd_pipelines import sdxl_pipeline
from tests.core.image_prompts.vision_files import save_transformers, vision_reference

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]

W, WC, BOOST = 0.8, 0.5, 1.3
STEPS = 2
SETTINGS = ImageSettings(
    prompt="a tiny fox", negative="blurry", width=64, height=64,
    sampling=Sampling(seed=11, steps=STEPS, cfg=5.0, sampler="euler", scheduler="karras"),
)  # fmt: skip


def _scales(per_t: list[float]) -> dict[str, Any]:
    """SDXL's 11 transformers (ComfyUI's forward order) as diffusers' per-block scale dict."""
    t = iter(per_t)
    down = {"block_1": [next(t), next(t)], "block_2": [next(t), next(t)]}
    mid = next(t)
    return {"down": down, "mid": mid, "up": {"block_0": [next(t) for _ in range(3)], "block_1": list(t)}}


STYLE = _scales([0, 0, 0, 0, 0, 0, W, 0, 0, 0, 0])  # InstantStyle's up_blocks.0.attentions.1
#: kind: (our arguments, diffusers' (scales, second adapter's role))
KINDS: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {
    "style and composition": (
        {"weight_type": "style and composition", "composition_weight": WC, "composition": True},
        [STYLE, _scales([0, 0, 0, WC, 0, 0, 0, 0, 0, 0, 0])], "composition"),
    "strong style and composition": (
        {"weight_type": "strong style and composition", "composition_weight": WC, "composition": True},
        [_scales([W, W, W, 0, W, W, W, W, W, W, W]), _scales([0, 0, 0, WC, 0, 0, 0, 0, 0, 0, 0])],
        "composition"),
    "style transfer precise": (
        {"weight_type": "style transfer precise", "boost": BOOST},
        [STYLE, _scales([0, 0, 0, BOOST, 0, 0, 0, 0, 0, 0, 0])], "swapped"),
    "composition precise": (
        {"weight_type": "composition precise", "boost": BOOST},
        [_scales([0, 0, 0, W, 0, 0, 0, 0, 0, 0, 0]),
         _scales([BOOST * 0.1] * 3 + [0, BOOST * 0.1, BOOST * 0.1, BOOST] + [BOOST * 0.1] * 4)], "swapped"),
    "layer weights 3:2.5, 6:1": (
        {"weight_type": "linear", "layer_weights": parse_layer_weights("3:2.5, 6:1")},
        [_scales([0, 0, 0, 2.5 * W, 0, 0, W, 0, 0, 0, 0]), _scales([0.0] * 11)], "composition"),
}  # fmt: skip


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Networks, Path, Path, np.ndarray]:
    root = tmp_path_factory.mktemp("ipa_blocks_sdxl")
    hf_unet, unet = layout_unet_pair(True, seed=3)
    pipe, nets = sdxl_pipeline(root, hf_unet, unet)
    tower = vision_reference(layers=1, seed=5)
    name = "ip-adapter_sdxl_vit-h.safetensors"
    ip = ip_adapter_file(root / "ipadapter" / name, plus=False, sdxl=True, inners=inner_widths(unet))
    folder = str(ip.parent)  # loaded twice: the second picture or the swapped rows
    pipe.load_ip_adapter([folder] * 2, subfolder=[""] * 2, weight_name=[name] * 2, image_encoder_folder=None)
    vision = save_transformers(tower, root / "CLIP-ViT-H-14.safetensors")
    plain = to_unit_image(Pipeline(nets, Compute()).run(SETTINGS, Hooks())[0])  # no image prompt
    return pipe, tower, nets, ip, vision, plain


@pytest.mark.parametrize("kind", list(KINDS))
def test_block_weight_type_picture_equals_diffusers_per_block_scales(
    setup: tuple[Any, Any, Networks, Path, Path, np.ndarray], kind: str
) -> None:
    pipe, tower, nets, ip, vision, plain = setup
    ours_args, scales, second = KINDS[kind]
    gen = np.random.default_rng(9)
    rgb, comp = (gen.integers(0, 256, (56, 72, 3), dtype=np.uint8) for _ in range(2))
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    args = dict(ours_args)
    if args.pop("composition", False):
        args["composition"] = comp
    applied = AppliedIpAdapter(load_ip_adapter(ip), load_image_encoder(vision), rgb, W, full, **args)
    ours = to_unit_image(pipeline.run(SETTINGS, Hooks(), passes=[IpAdapterPass((applied,))])[0])
    with torch.no_grad():
        units = (torch.from_numpy(p).float().div(255).permute(2, 0, 1)[None] for p in (rgb, comp))
        pos, alt = (tower(pixel_values=clip_preprocess(u)).image_embeds for u in units)
    zero = torch.zeros_like(pos)
    first = torch.cat([zero, pos])[:, None]  # negative, positive
    masks: list[torch.Tensor | None] = [None, None]
    if second == "swapped":  # the negative row reads the picture, the positive row nothing
        other = torch.cat([pos, pos])[:, None]
        masks[1] = torch.cat([torch.ones(1, 1, 8, 8), torch.zeros(1, 1, 8, 8)])
    else:
        other = torch.cat([zero, alt])[:, None]
    pipe.set_ip_adapter_scale(scales)
    with discrete_comfy_schedule(pipe.scheduler, for_family("sdxl"), "euler", "karras", STEPS) as sigmas:
        noise = torch.randn((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(11))
        theirs = pipe(
            "a tiny fox", negative_prompt="blurry", num_inference_steps=STEPS, guidance_scale=5.0,
            latents=noise, height=64, width=64, original_size=(64, 64), target_size=(64, 64),
            crops_coords_top_left=(0, 0), output_type="np", sigmas=sigmas,
            ip_adapter_image_embeds=[first, other], cross_attention_kwargs={"ip_adapter_masks": masks},
        ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"{kind}: max |ours - diffusers| = {err:.1e}")
    assert err < 3 / 255
    assert float(np.abs(ours - plain).max()) > 1e-2  # the image prompt reached the picture
