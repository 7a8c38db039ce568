"""InpaintModelConditioning on a 9-channel UNet: the extra channels are ComfyUI's, and a run goes
through (tiny real networks, random weights)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from core.archs.protocols import InpaintChannels
from core.generate.controlnet import center_resize
from core.generate.inpaint import InpaintInputs, inpainting
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline, Timings
from core.generate.request import ImageSettings, Sampling
from core.models.unet import UNetConfig, UNetModel
from core.models.vae import SD1_LATENT, AutoencoderKL
from core.sampling.patches import ModelPatches
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import clip_pair, vae_pair
from tests.fixtures.tiny_models import random_state


def _nets(in_channels: int) -> Networks:
    cfg = UNetConfig.per_level(
        model_channels=32, channel_mult=(1, 2), num_res_blocks=1, level_depth=(1, 0),
        transformer_depth_middle=1, context_dim=32, num_heads=2, num_head_channels=None,
        in_channels=in_channels,
    )  # fmt: skip
    unet = UNetModel(cfg).eval()
    unet.load_state_dict(random_state(UNetModel(cfg, device="meta"), 3), strict=True)
    _, clip = clip_pair(32, act="quick_gelu", projection=None, seed=1)
    _, vae = vae_pair(4, SD1_LATENT, seed=2)
    return Networks("sd1", unet, TextEncoders(clip_l=clip), vae)


def test_inpaint_model_channels_are_the_rounded_mask_and_the_grey_masked_latent(tmp_path: Path) -> None:
    nets = _nets(9)
    pipeline = Pipeline(nets, Compute())
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (66, 69, 3), dtype=np.uint8)  # cropped to 64x64 at (1, 2)
    mask = np.zeros((33, 35), np.uint8)  # a smaller mask: resized to the picture first
    mask[5:20, 10:30] = 255
    Image.fromarray(mask).save(tmp_path / "m.png")
    found = inpainting(pipeline, tmp_path / "m.png", rgb, Hooks())
    assert found.extra is not None
    concat = found.extra.concat(8, 8)
    assert concat.shape == (1, 5, 8, 8)

    m = F.interpolate(torch.from_numpy(mask / 255.0).float()[None, None], size=(66, 69), mode="bilinear")
    m = m[:, :, 1:65, 2:66]
    pixels = torch.from_numpy(rgb.astype(np.float32) / 255.0).permute(2, 0, 1)[None][:, :, 1:65, 2:66]
    grey = (pixels - 0.5) * (1.0 - m.round()) + 0.5
    vae: AutoencoderKL = nets.vae
    with torch.no_grad():
        latent = vae.moments(grey * 2.0 - 1.0).chunk(2, dim=1)[0] * 0.18215
    small = F.interpolate(m, size=(8, 8), mode="bilinear").round()
    assert torch.equal(concat[:, :1], small)
    assert torch.allclose(concat[:, 1:], latent, atol=1e-6)
    assert torch.equal(found.noise_mask, m)

    s = Sampling(seed=2, steps=2, denoise=0.8)
    settings = ImageSettings("a cat", sampling=s, width=64, height=64, init_image=tmp_path / "m.png")
    init = pipeline.encode_image(rgb, Hooks())
    positive, negative, _ = pipeline.encode_prompts(settings, Hooks())
    patches = ModelPatches(extra_inputs=(found.extra,))
    out = pipeline.sample(
        settings, positive, negative, Hooks(), Timings(), init, denoise_mask=found.noise_mask, patches=patches
    )
    assert out.shape == (1, 4, 8, 8) and torch.isfinite(out).all()


def test_flux_fill_channels_follow_the_latent_size_as_comfyui_concat_cond() -> None:
    """FLUX.1 Fill's extra channels for a latent of another size (the hires pass): the masked
    picture's latent resized bilinear (centre) to it, then the unrounded picture mask resized to 8x
    it and packed 8x8 cell by cell, row-major (ComfyUI's Flux ``concat_cond``)."""
    g = torch.Generator().manual_seed(0)
    latent = torch.randn(1, 16, 6, 8, generator=g)
    mask = torch.rand(1, 1, 48, 64, generator=g)  # soft, as outpainting's feathering makes it
    inputs = InpaintInputs(latent, mask, InpaintChannels(mask_cell=8))
    same = inputs.concat(6, 8)
    assert same.shape == (1, 16 + 64, 6, 8)
    assert torch.equal(same[:, :16], latent)
    for c in range(64):  # channel c: the pixel (c // 8, c % 8) of each 8x8 cell, unrounded
        assert torch.equal(same[0, 16 + c], mask[0, 0, c // 8 :: 8, c % 8 :: 8])
    big = inputs.concat(12, 16)
    assert torch.allclose(big[:, :16], center_resize(latent, 16, 12, mode="bilinear"))
    m = center_resize(mask, 128, 96, mode="bilinear")
    assert torch.equal(big[0, 16 + 9], m[0, 0, 1::8, 1::8])
    x = torch.zeros(2, 16, 12, 16, dtype=torch.float64)
    assert inputs(x).shape == (2, 80, 12, 16) and inputs(x).dtype == torch.float64
