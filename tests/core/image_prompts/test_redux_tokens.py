"""FLUX Redux's tokens: SigLIP so400m (real width, 2 layers) and Redux at real width (1152 -> 12288
-> 4096, a bfloat16 file as released), read by Loadout's loaders, equal diffusers'
``FluxPriorReduxPipeline`` (transformers' ``SiglipVisionModel`` and diffusers' ``ReduxImageEncoder``)
on a 384 x 384 picture, where ComfyUI's preprocessing and diffusers' ``SiglipImageProcessor`` agree
(no resize)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from core.generate.redux import redux_tokens
from core.loading.image_encoder import load_image_encoder
from core.loading.image_prompts import load_style_model
from tests.core.image_prompts.test_redux_parity import _picture
from tests.fixtures.image_prompt_files import hf_redux, hf_siglip, save

diffusers = pytest.importorskip("diffusers")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.fixture(scope="module")
def siglip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    hf = hf_siglip()
    return hf, save(hf, tmp_path_factory.mktemp("siglip") / "sigclip_vision_patch14_384.safetensors")


def test_redux_tokens_equal_flux_prior_redux_pipeline(siglip: tuple[Any, Path], tmp_path: Path) -> None:
    from transformers import SiglipImageProcessor

    hf_encoder, encoder_file = siglip
    embedder = hf_redux(4096)
    redux_file = save(embedder, tmp_path / "flux1-redux-dev.safetensors", torch.bfloat16)
    embedder.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in embedder.state_dict().items()})
    processor = SiglipImageProcessor(size={"height": 384, "width": 384}, resample=3)
    pipe = diffusers.FluxPriorReduxPipeline(
        image_encoder=hf_encoder, feature_extractor=processor, image_embedder=embedder
    )
    picture = Image.open(_picture(tmp_path / "p.png", 384, 384)).convert("RGB")
    with torch.no_grad():
        theirs = pipe(image=picture, return_dict=False)[0][:, 512:]  # after its 512 zero text tokens
    style = load_style_model(redux_file)
    assert (style.family, style.module.redux_up.weight.dtype) == ("flux", torch.bfloat16)  # zero-copy
    unit = torch.from_numpy(np.array(picture)).float().div(255).permute(2, 0, 1)[None]
    with torch.no_grad():
        encoder = load_image_encoder(encoder_file)
        ours = redux_tokens(encoder, style, unit, 1.0, torch.device("cpu"), torch.float32)
    err = float((ours - theirs).abs().max())
    print(f"redux tokens: max |ours - diffusers| = {err:.2e} (scale {float(theirs.abs().mean()):.3f})")
    assert ours.shape == theirs.shape == (1, 729, 4096)
    assert err < 1e-4 * max(1.0, float(theirs.abs().max()))
