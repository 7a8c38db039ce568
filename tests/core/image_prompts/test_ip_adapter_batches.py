"""Several pictures for one IP-Adapter (plus, SD1.5), whole pictures against diffusers'
StableDiffusionPipeline after ``load_ip_adapter`` (the shared set-up of ``conftest.py``), fed the
tower outputs ComfyUI_IPAdapter_plus makes of them (``ip_adapter_image_embeds``): ``concat`` as
diffusers' own several images (each picture's 16 tokens side by side: 32 tokens, the negative's
repeated per picture), the other ``combine_embeds`` as the pack's formulas (written here from its
``ipadapter_execute``) on the penultimate hidden states, giving diffusers one picture; a negative
picture (the pack's ``image_negative``) instead of the black one."""

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

STEPS, W = 2, 0.8
SETTINGS = ImageSettings(
    prompt="a tiny fox", negative="blurry", width=64, height=64,
    sampling=Sampling(seed=11, steps=STEPS, cfg=6.0, sampler="euler", scheduler="karras"),
)  # fmt: skip


def _pack_combine(rows: torch.Tensor, mode: str) -> torch.Tensor:
    """ComfyUI_IPAdapter_plus's ``combine_embeds`` on (N, ...) tower outputs."""
    if mode == "add":
        return torch.sum(rows, dim=0).unsqueeze(0)
    if mode == "subtract":
        return (rows[0] - torch.mean(rows[1:], dim=0)).unsqueeze(0)
    if mode == "average":
        return torch.mean(rows, dim=0).unsqueeze(0)
    assert mode == "norm average"
    return torch.mean(rows / torch.norm(rows, dim=0, keepdim=True), dim=0).unsqueeze(0)


def _rgb(seed: int, h: int, w: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    ("mode", "count", "negative"),
    [("concat", 2, False), ("subtract", 3, False), ("norm average", 2, True)],
)
def test_several_pictures_equal_diffusers_fed_the_packs_combination(
    sd15_plus_pipe: tuple[Any, Any, Networks, Path, Path], mode: str, count: int, negative: bool
) -> None:
    pipe, tower, nets, ip, vision = sd15_plus_pipe
    pictures = [_rgb(9 + i, 72 - 8 * i, 64) for i in range(count)]
    neg_rgb = _rgb(30, 64, 80) if negative else None
    pipeline = Pipeline(nets, Compute())
    full = (pipeline.sampling.percent_to_sigma(0.0), pipeline.sampling.percent_to_sigma(1.0))
    applied = AppliedIpAdapter(
        load_ip_adapter(ip), load_image_encoder(vision), pictures[0], W, full,
        pictures=tuple(pictures[1:]), combine=mode, negative=neg_rgb,
    )  # fmt: skip
    ours = to_unit_image(pipeline.run(SETTINGS, Hooks(), passes=[IpAdapterPass((applied,))])[0])

    def penultimate(unit: torch.Tensor) -> torch.Tensor:
        return tower(pixel_values=clip_preprocess(unit), output_hidden_states=True).hidden_states[-2]

    def unit(rgb: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(rgb).float().div(255).permute(2, 0, 1)[None]

    with torch.no_grad():
        rows = torch.cat([penultimate(unit(p)) for p in pictures])  # (N, 257, 1280)
        neg = penultimate(unit(neg_rgb) if neg_rgb is not None else torch.zeros(1, 3, EMPTY_SIZE, EMPTY_SIZE))
    if mode == "concat":  # diffusers' several images: (batch, images, 257, 1280)
        embeds = torch.cat([neg.expand(count, -1, -1)[None], rows[None]])
    else:
        embeds = torch.cat([neg, _pack_combine(rows, mode)])[:, None]
    pipe.set_ip_adapter_scale(W)
    with discrete_comfy_schedule(pipe.scheduler, for_family("sd1"), "euler", "karras", STEPS) as sigmas:
        noise = torch.randn((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(11))
        theirs = pipe(
            "a tiny fox", negative_prompt="blurry", num_inference_steps=STEPS, guidance_scale=6.0,
            latents=noise, height=64, width=64, output_type="np", sigmas=sigmas,
            ip_adapter_image_embeds=[embeds],
        ).images  # fmt: skip
    err = float(np.abs(ours - np.asarray(theirs)).max())
    print(f"{mode} x{count} negative={negative}: max |ours - diffusers| = {err:.1e}")
    assert err < 3 / 255
    if mode == "concat":  # the second picture's tokens reached the picture (the others: their formulas)
        first = AppliedIpAdapter(load_ip_adapter(ip), load_image_encoder(vision), pictures[0], W, full)
        alone = to_unit_image(pipeline.run(SETTINGS, Hooks(), passes=[IpAdapterPass((first,))])[0])
        assert float(np.abs(ours - alone).max()) > 1e-2
