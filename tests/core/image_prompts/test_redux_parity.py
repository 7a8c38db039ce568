"""FLUX Redux against diffusers, set up as ComfyUI computes (the tokens alone:
``test_redux_tokens.py``).

The whole picture: a Loadout generation with a Redux pass (the picture read from a PNG, centre
cropped and encoded as ``CLIPVisionEncode``, the tokens times the strength appended to the T5 context
as ``StyleModelApply``, several pictures in order) equals diffusers' ``FluxPipeline`` fed
``prompt_embeds`` = its T5 embeds + the Redux tokens concatenated as ComfyUI concatenates them.
(``FluxPriorReduxPipeline`` itself differs from ComfyUI: it encodes the prompt again or uses 512
zero tokens, scales text and picture tokens together, and sums several pictures' embeds:
docs/families.md.) The Flux network has real heads (128 wide), one double and one single block, and
narrow text encoders, as the other Flux parity tests; Redux's context width is T5's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from core.archs.image_encoders import clip_preprocess
from core.archs.siglip import SIGLIP_SO400M
from core.generate.pipeline import Compute, Hooks, Pipeline
from core.generate.redux import ReduxPass, read_pictures
from core.generate.request import ImageSettings, Sampling
from core.generate.workflow_request import ReduxUse
from core.loading.image_encoder import load_image_encoder
from core.loading.image_prompts import load_style_model
from core.models.flux import Flux, pack_latents
from core.sampling import for_family, ksampler_sigmas
from core.text.conditioning import FLUX_T5_MIN_LENGTH
from tests.core.generate.reference import to_unit_image
from tests.fixtures.image_prompt_files import hf_redux, hf_siglip, save

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("sentencepiece")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*FluxPosEmbed.*:FutureWarning"),
]


def _picture(path: Path, w: int, h: int, seed: int = 5) -> Path:
    small = np.random.default_rng(seed).integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC).save(path)
    return path


@pytest.fixture(scope="module")
def siglip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    hf = hf_siglip()
    return hf, save(hf, tmp_path_factory.mktemp("siglip") / "sigclip_vision_patch14_384.safetensors")


def _settings(prompt: str) -> ImageSettings:
    sampling = Sampling(seed=7, steps=3, sampler="euler", scheduler="simple", guidance=3.5)
    return ImageSettings(prompt, width=64, height=64, sampling=sampling)


def test_a_flux_picture_with_redux_matches_flux_pipeline(siglip: tuple[Any, Path], tmp_path: Path) -> None:
    from tests.core.image_prompts.flux_pair import flux_pair

    hf_encoder, encoder_file = siglip
    pipe, nets, t5_tok, width = flux_pair(tmp_path)
    embedder = hf_redux(width, seed=9)
    redux_file = save(embedder, tmp_path / "flux1-redux-dev.safetensors")
    wide, tall = _picture(tmp_path / "wide.png", 480, 320, 6), _picture(tmp_path / "tall.png", 300, 420, 8)
    uses = (ReduxUse(redux_file, wide, 0.8), ReduxUse(redux_file, tall, 1.5))
    encoder, style = load_image_encoder(encoder_file), load_style_model(redux_file)
    settings = _settings("a lighthouse at dusk")
    made = ReduxPass(read_pictures(uses, "flux-dev"), encoder, (style, style))
    ours = to_unit_image(
        Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(settings, Hooks(), None, [made])[0]
    )
    plain = to_unit_image(Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(settings, Hooks())[0])

    rule = SIGLIP_SO400M
    tokens = []
    for use in uses:  # ComfyUI's CLIPVisionEncode (centre crop) and StyleModelApply (multiply)
        unit = torch.from_numpy(np.array(Image.open(use.picture).convert("RGB"))).float().div(255)
        ready = clip_preprocess(unit.permute(2, 0, 1)[None], rule.size, rule.mean, rule.std, crop=True)
        with torch.no_grad():
            hidden = hf_encoder(pixel_values=ready).last_hidden_state
            tokens.append(embedder(hidden).image_embeds * use.strength)
    s = settings.sampling
    with torch.no_grad():
        embeds, pooled, _ = pipe.encode_prompt(
            settings.prompt, None, max_sequence_length=FLUX_T5_MIN_LENGTH, device="cpu"
        )
        sigmas = ksampler_sigmas(for_family("flux-dev"), s.scheduler, s.sampler, s.steps)
        noise = torch.randn((1, 16, 8, 8), generator=torch.Generator("cpu").manual_seed(s.seed))
        theirs = pipe(
            prompt_embeds=torch.cat((embeds, *tokens), dim=1), pooled_prompt_embeds=pooled,
            num_inference_steps=s.steps, sigmas=sigmas[:-1].tolist(), guidance_scale=3.5,
            latents=pack_latents(noise), height=64, width=64, output_type="np",
        ).images  # fmt: skip
    err, moved = float(np.abs(ours - theirs).max()), float(np.abs(ours - plain).mean())
    print(f"flux + redux: max |ours - diffusers| = {err * 255:.4f}/255; redux moves it {moved * 255:.3f}/255")
    assert ours.shape == theirs.shape == (1, 64, 64, 3)
    assert err * 255 < 3 and float(ours.std()) > 0.05
    assert moved > 20 * float(np.abs(ours - theirs).mean())  # dropped tokens would fail here
    assert isinstance(nets.diffusion, Flux)
