"""CLIP vision towers (kind image_encoder): detection from headers, key-by-key loading of both
layouts ComfyUI takes, ComfyUI's preprocessing and the outputs image prompts read, against
transformers' CLIPVisionModelWithProjection at real width (ViT-H/14) with 2 layers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.archs.clip_vision.preprocess import MEAN, STD, clip_preprocess
from core.detect.detector import detect
from core.errors import ModelMismatchError
from core.files import read_tensor_index
from core.files.tensor_info import TensorInfo
from core.loading.image_encoder import load_image_encoder
from tests.core.image_prompts.vision_files import save_open_clip, save_transformers, vision_reference

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tower(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path, Path]:
    root = tmp_path_factory.mktemp("vision")
    model = vision_reference()
    return (
        model,
        save_transformers(model, root / "vit-h.safetensors"),
        save_open_clip(model, root / "oc.safetensors"),
    )


def test_both_layouts_are_detected_as_clip_vit_h(tower: tuple[object, Path, Path]) -> None:
    _, hf, oc = tower
    for path, layout in ((hf, "transformers"), (oc, "open_clip")):
        index = read_tensor_index(path)
        det = detect(index.tensors, {}, path.name)
        assert (det.kind, det.family, det.layout) == ("image_encoder", "clip-vit-h", layout)
        assert det.fields["layers"] == 2 and det.fields["width"] == 1280


def test_bigg_width_is_its_own_family() -> None:
    def info(*shape: int) -> TensorInfo:
        return TensorInfo("F16", shape, 2 * int(torch.Size(shape).numel()))

    tensors = {
        "vision_model.encoder.layers.0.layer_norm1.weight": info(1664),
        "vision_model.encoder.layers.47.layer_norm1.weight": info(1664),
        "visual_projection.weight": info(1280, 1664),
    }
    det = detect(tensors, {}, "clip_vision_g.safetensors")
    assert (det.kind, det.family, det.fields["layers"]) == ("image_encoder", "clip-vit-bigg", 2)


def test_outputs_equal_transformers(tower: tuple[object, Path, Path]) -> None:
    model, hf, oc = tower
    pixels = torch.rand(2, 3, 300, 256, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(pixel_values=clip_preprocess(pixels), output_hidden_states=True)  # type: ignore[operator]
        for path in (hf, oc):
            enc = load_image_encoder(path)
            out = enc.arch.encode(enc.module, pixels, CPU, torch.float32)
            torch.testing.assert_close(out.image_embeds, ref.image_embeds, atol=1e-4, rtol=0)
            torch.testing.assert_close(out.penultimate, ref.hidden_states[-2], atol=1e-4, rtol=0)
            torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state, atol=1e-4, rtol=0)


def test_the_weights_are_the_files_own_memory(tower: tuple[object, Path, Path]) -> None:
    _, _, oc = tower
    enc = load_image_encoder(oc)
    q = enc.module.vision_model.encoder.layers[0].self_attn.q_proj.weight  # type: ignore[union-attr,index]
    assert q.untyped_storage().nbytes() >= 3 * q.numel() * 4  # a view of the mapped in_proj, no copy


def test_comfyui_preprocessing_scales_the_short_side_and_crops_the_centre() -> None:
    pixels = torch.zeros(1, 3, 224, 448)
    pixels[..., 112:336] = 1.0  # the middle square white, the sides black
    out = clip_preprocess(pixels)
    white = (1.0 - torch.tensor(MEAN)) / torch.tensor(STD)
    assert out.shape == (1, 3, 224, 224)
    torch.testing.assert_close(out[0, :, 100, 100], white)
    square = torch.full((1, 3, 224, 224), 0.5)
    expect = (torch.tensor(128 / 255) - torch.tensor(MEAN)) / torch.tensor(STD)  # rounded to 8 bits
    torch.testing.assert_close(clip_preprocess(square)[0, :, 0, 0], expect)


def test_a_damaged_file_and_another_kind_are_refused(
    tower: tuple[object, Path, Path], tmp_path: Path
) -> None:
    _, hf, _ = tower
    sd = load_file(str(hf))
    del sd["vision_model.encoder.layers.1.mlp.fc2.bias"]
    sd["vision_model.encoder.layers.0.extra.weight"] = torch.zeros(2)
    save_file(sd, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ModelMismatchError) as err:
        load_image_encoder(tmp_path / "bad.safetensors")
    assert err.value.code == "layout_mismatch" and "1 missing, 1 unexpected" in (err.value.why or "")
    lora = {
        "lora_unet_x.lora_down.weight": torch.zeros(4, 8),
        "lora_unet_x.lora_up.weight": torch.zeros(8, 4),
    }
    save_file(lora, str(tmp_path / "lora.safetensors"))
    with pytest.raises(ModelMismatchError) as err:
        load_image_encoder(tmp_path / "lora.safetensors")
    assert err.value.code == "wrong_kind"
