"""SigLIP so400m's vision tower (FLUX Redux's image encoder): detected from its shapes, checked key
by key, loaded lazily, and the same numbers as transformers' ``SiglipVisionModel`` (real width, 2
layers, random weights, ComfyUI's layer-norm eps of 1e-5) in float32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.archs.image_encoders import clip_preprocess
from core.archs.siglip import SIGLIP_SO400M
from core.errors import ModelMismatchError
from core.files.safetensors import read_header
from core.loading.image_encoder import load_image_encoder
from core.loading.loader import inspect_for_loading
from tests.fixtures.image_prompt_files import hf_siglip, save

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    hf = hf_siglip()
    return hf, save(hf, tmp_path_factory.mktemp("siglip") / "sigclip_vision_patch14_384.safetensors")


def test_detected_and_equal_to_transformers(files: tuple[object, Path]) -> None:
    hf, path = files
    det = inspect_for_loading(path)[1]
    assert (det.kind, det.family, det.fields["layers"], det.fields["head"]) == (
        "image_encoder", "siglip-so400m", 2, True,
    )  # fmt: skip
    loaded = load_image_encoder(path)
    pixels = torch.randn(1, 3, 384, 384, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = loaded.module(pixels)
        theirs = hf(pixel_values=pixels).last_hidden_state  # type: ignore[operator]
    assert ours.shape == (1, 729, 1152)
    err = float((ours - theirs).abs().max())
    print(f"siglip: max |ours - transformers| = {err:.2e}")
    assert err < 1e-4 and float(theirs.std()) > 0.1


def test_weights_are_the_files_own_pages(files: tuple[object, Path]) -> None:
    """Zero-copy: each loaded weight is a view of the mapped file (no head loaded)."""
    path = files[1]
    module, header = load_image_encoder(path).module, read_header(path)
    bases = {w.data_ptr() - header.data_start - header.offsets[k][0] for k, w in module.state_dict().items()}
    assert len(bases) == 1  # one mapping, each tensor at its own offset
    assert not any(k.startswith("vision_model.head.") for k in module.state_dict())


def test_comfyuis_preprocessing_crops_the_centre_or_stretches() -> None:
    """A 768 x 384 picture (left quarter black, right quarter white, grey middle): the centre crop
    keeps only the grey middle; "none" stretches, keeping both bands. 8-bit rounding, mean/std 0.5."""
    pixels = torch.full((1, 3, 384, 768), 0.5)
    pixels[..., :192], pixels[..., -192:] = 0.0, 1.0
    rule = SIGLIP_SO400M
    centre = clip_preprocess(pixels, rule.size, rule.mean, rule.std, crop=True)
    stretched = clip_preprocess(pixels, rule.size, rule.mean, rule.std, crop=False)
    assert centre.shape == stretched.shape == (1, 3, 384, 384)
    grey = (round(0.5 * 255) / 255 - 0.5) / 0.5
    assert torch.allclose(centre[..., 8:-8], torch.full_like(centre[..., 8:-8], grey), atol=1e-6)
    assert float(stretched[..., :80].max()) == -1.0 and float(stretched[..., -80:].min()) == 1.0
    same = clip_preprocess(torch.full((1, 3, 384, 384), 0.3), rule.size, rule.mean, rule.std)
    assert torch.allclose(same, torch.full_like(same, (round(0.3 * 255) / 255 - 0.5) / 0.5))


def test_a_damaged_or_clip_file_is_refused_in_words(files: tuple[object, Path], tmp_path: Path) -> None:
    state = load_file(str(files[1]))
    del state["vision_model.encoder.layers.1.mlp.fc2.bias"]
    save_file(state, str(tmp_path / "damaged.safetensors"))
    with pytest.raises(ModelMismatchError, match="does not match the SigLIP") as info:
        load_image_encoder(tmp_path / "damaged.safetensors")
    assert info.value.code == "layout_mismatch" and "1 missing" in (info.value.why or "")
    state = load_file(str(files[1]))
    state["vision_model.embeddings.class_embedding"] = torch.zeros(1152)  # a CLIP vision tower's
    save_file(state, str(tmp_path / "clip.safetensors"))
    assert inspect_for_loading(tmp_path / "clip.safetensors")[1].kind != "image_encoder"
    with pytest.raises(ModelMismatchError, match="not an image encoder"):
        load_image_encoder(tmp_path / "clip.safetensors")
