"""Metadata summaries, trigger words, family hints and sidecar files, from real files in tmp_path."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from core.detect.metadata import (
    MAX_TRIGGER_WORDS,
    family_from_text,
    family_hints,
    summarize_metadata,
    thumbnail,
    trigger_words,
)
from core.detect.sidecars import SIDECAR_CAP, find_preview, read_sidecar_info
from core.files.safetensors import read_header
from tests.fixtures.st_files import write_sparse


def _png() -> bytes:
    """A real 2x2 PNG (torchvision-free: written by hand with zlib)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes([255, 0, 0] * 2) for _ in range(2))
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )


KOHYA = {
    "modelspec.sai_model_spec": "1.0.0",
    "modelspec.architecture": "stable-diffusion-xl-v1-base/lora",
    "modelspec.title": "Ohwx Portrait",
    "modelspec.author": "someone",
    "modelspec.description": "portraits",
    "modelspec.resolution": "1024x1024",
    "modelspec.trigger_phrase": "ohwx",
    "modelspec.license": "openrail++",
    "modelspec.date": "2024-05-01T10:00:00",
    "modelspec.prediction_type": "epsilon",
    "ss_network_module": "networks.lora",
    "ss_network_dim": "32",
    "ss_network_alpha": "16.0",
    "ss_network_args": json.dumps({"conv_dim": "8", "conv_alpha": "4"}),
    "ss_base_model_version": "sdxl_base_v1-0",
    "ss_sd_model_name": "sd_xl_base_1.0.safetensors",
    "ss_epoch": "10",
    "ss_steps": "2000",
    "ss_num_train_images": "400",
    "ss_v2": "False",
    "ss_dataset_dirs": json.dumps({"10_ohwx woman": {"n_repeats": 10, "img_count": 40}}),
    "ss_tag_frequency": json.dumps(
        {"10_ohwx woman": {"smile": 10, " ohwx woman": 40, "1girl": 38, "outdoors": 5, "OHWX": 3}}
    ),
}


def _read_metadata(tmp_path: Path, metadata: dict[str, str]) -> dict[str, str]:
    path = write_sparse(
        tmp_path / "lora.safetensors", {"lora_unet_x.lora_down.weight": (4, 8)}, metadata=metadata
    )
    return read_header(path).metadata


def test_kohya_and_modelspec_summary_from_a_real_file(tmp_path: Path) -> None:
    md = _read_metadata(
        tmp_path,
        {**KOHYA, "modelspec.thumbnail": "data:image/png;base64," + base64.b64encode(_png()).decode()},
    )
    s = summarize_metadata(md)
    assert (s.title, s.architecture, s.author, s.description) == (
        "Ohwx Portrait",
        "stable-diffusion-xl-v1-base/lora",
        "someone",
        "portraits",
    )
    assert (s.resolution, s.trigger_phrase, s.license, s.prediction_type) == (
        "1024x1024",
        "ohwx",
        "openrail++",
        "epsilon",
    )
    assert (s.network_module, s.network_dim, s.network_alpha) == ("networks.lora", 32, 16.0)
    assert s.network_args == {"conv_dim": "8", "conv_alpha": "4"}
    assert (s.base_model_version, s.base_model_name, s.v2) == (
        "sdxl_base_v1-0",
        "sd_xl_base_1.0.safetensors",
        False,
    )
    assert (s.epochs, s.steps, s.train_images) == (10, 2000, 400)
    # trigger phrase, then tags in (nearly) every image (40/40, 38/40), then the rest; "OHWX" is a dup
    assert s.trigger_words == ("ohwx", "ohwx woman", "1girl", "smile", "outdoors")
    assert s.has_thumbnail and s.warnings == ()
    found = thumbnail(md)
    assert found is not None and found == ("image/png", _png())


def test_trigger_words_are_capped_and_merge_datasets() -> None:
    tags = {f"tag{i}": 100 - i for i in range(20)}
    md = {"ss_tag_frequency": json.dumps({"5_a": tags, "3_b": {"tag19": 500}})}
    words = trigger_words(md)
    assert len(words) == MAX_TRIGGER_WORDS
    assert words[0] == "tag19"  # 81 + 500 across both datasets
    assert words[1:3] == ("tag0", "tag1")


def test_trigger_words_from_ss_datasets_when_there_is_no_ss_tag_frequency() -> None:
    md = {
        "ss_datasets": json.dumps(
            [{"num_train_images": 12, "tag_frequency": {"img": {"mychar": 12, "red hair": 4}}}]
        )
    }
    assert trigger_words(md) == ("mychar", "red hair")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ss_tag_frequency", "{not json"),
        ("ss_tag_frequency", json.dumps(["a", "list"])),
        ("ss_network_args", "{'single': 'quotes'}"),
        ("ss_dataset_dirs", "[[["),
        ("ss_datasets", "nope"),
    ],
)
def test_bad_json_in_metadata_warns_and_never_raises(tmp_path: Path, key: str, value: str) -> None:
    md = _read_metadata(tmp_path, {"ss_tag_frequency": json.dumps({"d": {"ok": 1}}), key: value})
    s = summarize_metadata(md)
    assert any(key in w for w in s.warnings)
    assert s.network_args == {}


def test_unusable_values_read_as_missing() -> None:
    s = summarize_metadata(
        {"ss_network_dim": "Dynamic", "ss_network_alpha": "None", "ss_epoch": "", "modelspec.title": "  "}
    )
    assert (s.network_dim, s.network_alpha, s.epochs, s.title) == (None, None, None, None)
    assert s.trigger_words == () and not s.has_thumbnail and s.warnings == ()
    assert thumbnail({"modelspec.thumbnail": "data:image/png;base64,@@@not base64@@@"}) is None
    assert thumbnail({"modelspec.thumbnail": "https://example.com/a.png"}) is None
    assert not summarize_metadata({"modelspec.thumbnail": "data:image/png;base64,!!"}).has_thumbnail


# Family hints ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "family", "source", "variant", "exact"),
    [
        (
            {"modelspec.architecture": "stable-diffusion-xl-v1-base/lora"},
            "sdxl",
            "modelspec.architecture",
            None,
            True,
        ),
        ({"modelspec.architecture": "stable-diffusion-v1/lora"}, "sd1", "modelspec.architecture", None, True),
        (
            {"modelspec.architecture": "stable-diffusion-v2-768-v"},
            "sd2",
            "modelspec.architecture",
            "v-prediction",
            True,
        ),
        (
            {"modelspec.architecture": "stable-diffusion-3-medium"},
            "sd3",
            "modelspec.architecture",
            None,
            True,
        ),
        (
            {"modelspec.architecture": "stable-diffusion-3-5-large/lora"},
            "sd3.5-large",
            "modelspec.architecture",
            None,
            True,
        ),
        ({"modelspec.architecture": "flux-1-dev/lora"}, "flux-dev", "modelspec.architecture", None, True),
        ({"modelspec.architecture": "flux-1-schnell"}, "flux-schnell", "modelspec.architecture", None, True),
        ({"modelspec.architecture": "flux-1"}, "flux-dev", "modelspec.architecture", None, False),
        ({"modelspec.architecture": "chroma/lora"}, "chroma", "modelspec.architecture", None, True),
        ({"ss_base_model_version": "sdxl_base_v1-0"}, "sdxl", "ss_base_model_version", None, True),
        ({"ss_base_model_version": "sd_v1"}, "sd1", "ss_base_model_version", None, True),
        ({"ss_base_model_version": "sd_v2"}, "sd2", "ss_base_model_version", None, True),
        ({"ss_base_model_version": "flux1"}, "flux-dev", "ss_base_model_version", None, False),
        ({"ss_base_model_version": "sd3"}, "sd3", "ss_base_model_version", None, True),
        ({"ss_v2": "True"}, "sd2", "ss_v2", None, True),
        (
            {"ss_v2": "True", "ss_v_parameterization": "True"},
            "sd2",
            "ss_v_parameterization",
            "v-prediction",
            True,
        ),
        ({"modelspec.prediction_type": "v"}, None, "modelspec.prediction_type", "v-prediction", True),
        (
            {"ss_sd_model_name": "C:\\models\\v1-5-pruned-emaonly.safetensors"},
            "sd1",
            "ss_sd_model_name",
            None,
            True,
        ),
    ],
)
def test_metadata_hints(
    metadata: dict[str, str], family: str | None, source: str, variant: str | None, exact: bool
) -> None:
    hints = family_hints(None, metadata)
    assert any((h.family, h.source, h.variant, h.exact) == (family, source, variant, exact) for h in hints), (
        hints
    )
    assert all(h.text for h in hints)


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("sd_xl_base_1.0.safetensors", {("sdxl", None)}),
        ("juggernautXL_v9.safetensors", {("sdxl", None)}),
        ("sd_xl_refiner_1.0.safetensors", {("sdxl-refiner", None)}),
        ("v1-5-pruned-emaonly.safetensors", {("sd1", None)}),
        ("sd15_pixel_style.safetensors", {("sd1", None)}),
        ("sd-v1-5-inpainting.ckpt", {("sd1", None), (None, "inpaint")}),
        ("v2-1_768-ema-pruned.safetensors", {("sd2", None)}),
        ("768-v-ema.ckpt", {(None, "v-prediction")}),
        ("noobaiXLVpred10.safetensors", {("sdxl", None), (None, "v-prediction")}),
        ("sd3_medium_incl_clips.safetensors", {("sd3", None)}),
        ("sd3.5_large.safetensors", {("sd3.5-large", None)}),
        ("flux1-dev-fp8.safetensors", {("flux-dev", None)}),
        ("flux1-schnell.safetensors", {("flux-schnell", None)}),
        ("xlabs_flux_realism_lora.safetensors", {("flux-dev", None)}),
        ("wan2.2_t2v_high_noise_14B_fp16.safetensors", {("wan2.2", None)}),
        ("wan2.1_t2v_14B_bf16.safetensors", {("wan2.1", None)}),
        ("wan_2.1_vae.safetensors", {("wan2.1", None), ("vae-wan", None)}),
        ("ae.safetensors", {("vae-flux", None)}),
        ("flux_vae.safetensors", {("flux-dev", None), ("vae-flux", None)}),
        ("sd3_vae.safetensors", {("sd3", None), ("vae-sd3", None)}),
        ("sdxl_vae.safetensors", {("sdxl", None)}),
        ("vae-ft-mse-840000-ema-pruned.safetensors", {("sd1", None)}),
        ("hunyuan_video_720_cfgdistill_bf16.safetensors", {("hunyuan-video", None)}),
        ("ltxv-2b-0.9.8-distilled.safetensors", {("ltxv", None)}),
        ("qwen_image_fp8_e4m3fn.safetensors", {("qwen-image", None)}),
        ("dreamshaper_8.safetensors", set()),
        ("swan_lake.safetensors", set()),
    ],
)
def test_filename_hints(filename: str, expected: set[tuple[str | None, str | None]]) -> None:
    hints = family_hints(filename, {})
    assert {(h.family, h.variant) for h in hints} == expected
    assert all(h.source == "filename" and filename in h.text for h in hints)


def test_metadata_hints_come_before_filename_hints() -> None:
    hints = family_hints("flux1-dev.safetensors", {"ss_base_model_version": "sd_v1"})
    assert [h.source for h in hints] == ["ss_base_model_version", "filename"]


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("SD 1.5", "sd1"),
        ("SD 1.4", "sd1"),
        ("SD 2.1 768", "sd2"),
        ("SDXL 1.0", "sdxl"),
        ("Pony", "sdxl"),
        ("Illustrious", "sdxl"),
        ("NoobAI", "sdxl"),
        ("SD 3", "sd3"),
        ("SD 3.5 Large", "sd3.5-large"),
        ("SD 3.5 Medium", "sd3.5-medium"),
        ("SD 3.5", None),
        ("Flux.1 D", "flux-dev"),
        ("Flux.1 S", "flux-schnell"),
        ("Hunyuan Video", "hunyuan-video"),
        ("Wan Video 14B t2v", "wan2.1"),
        ("Wan Video 2.2 T2V-A14B", "wan2.2"),
        ("LTXV", "ltxv"),
        ("AuraFlow", "auraflow"),
        ("PixArt E", "pixart-sigma"),
        ("Other", None),
    ],
)
def test_civitai_base_model_names(text: str, family: str | None) -> None:
    assert family_from_text(text) == family


# Sidecars --------------------------------------------------------------------------------------


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.write_bytes(data)
    return path


def test_find_preview_order_and_case(tmp_path: Path) -> None:
    model = _touch(tmp_path / "style.fp16.safetensors")
    assert find_preview(model) is None
    _touch(tmp_path / "style.fp16.webp")
    assert find_preview(model) == tmp_path / "style.fp16.webp"
    _touch(tmp_path / "style.fp16.jpg")
    assert find_preview(model) == tmp_path / "style.fp16.jpg"
    _touch(tmp_path / "style.fp16.preview.jpeg")
    assert find_preview(model) == tmp_path / "style.fp16.preview.jpeg"
    _touch(tmp_path / "style.fp16.preview.png")
    assert find_preview(model) == tmp_path / "style.fp16.preview.png"
    (tmp_path / "other.png").mkdir()
    assert find_preview(tmp_path / "other.safetensors") is None  # a folder is not a preview
    names = ["Style.PREVIEW.PNG", "style.safetensors"]
    assert find_preview(tmp_path / "style.safetensors", names) == tmp_path / "Style.PREVIEW.PNG"
    assert find_preview(tmp_path / "style.safetensors", ["style.txt"]) is None


CIVITAI = {
    "id": 1234,
    "modelId": 99,
    "name": "v2.0",
    "baseModel": "SDXL 1.0",
    "trainedWords": ["ohwx woman", "red dress, smiling"],
    "description": "<p>Trained on <b>40</b> photos &amp; more.</p>",
    "model": {"name": "Ohwx Portrait", "type": "LORA", "nsfw": False},
    "images": [{"url": "https://example.com/1.png"}],
}
CM_INFO = {
    "ModelId": 7,
    "VersionId": 8,
    "ModelName": "From Matrix",
    "VersionName": "v1",
    "ModelDescription": "matrix text",
    "ModelType": "LORA",
    "BaseModel": "Flux.1 D",
    "Nsfw": True,
    "TrainedWords": ["OHWX WOMAN", "flux word"],
}


def test_civitai_info_and_cm_info(tmp_path: Path) -> None:
    model = _touch(tmp_path / "portrait.safetensors")
    (tmp_path / "portrait.civitai.info").write_text(json.dumps(CIVITAI), encoding="utf-8")
    info = read_sidecar_info(model)
    assert info.trained_words == ("ohwx woman", "red dress, smiling")
    assert (info.base_model, info.model_name, info.version_name, info.model_type) == (
        "SDXL 1.0",
        "Ohwx Portrait",
        "v2.0",
        "LORA",
    )
    assert info.description == "Trained on 40 photos & more."
    assert (info.nsfw, info.model_id, info.version_id) == (False, 99, 1234)
    assert [(h.family, h.source) for h in info.hints] == [("sdxl", "civitai.info")]
    (tmp_path / "portrait.cm-info.json").write_bytes(
        b"\xef\xbb\xbf" + json.dumps(CM_INFO).encode()
    )  # with a BOM
    both = read_sidecar_info(model)
    assert both.model_name == "Ohwx Portrait"  # civitai.info is read first and wins each field
    assert both.trained_words == ("ohwx woman", "red dress, smiling", "flux word")
    assert [h.family for h in both.hints] == ["sdxl", "flux-dev"]
    assert both.sources == (tmp_path / "portrait.civitai.info", tmp_path / "portrait.cm-info.json")
    assert both.warnings == ()
    (tmp_path / "portrait.civitai.info").unlink()
    only_cm = read_sidecar_info(model)
    assert (only_cm.model_name, only_cm.version_id, only_cm.nsfw, only_cm.description) == (
        "From Matrix",
        8,
        True,
        "matrix text",
    )


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'{"trainedWords": [', "not valid JSON"),
        (b"[1, 2, 3]", "not an object"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
    ],
)
def test_bad_sidecars_warn(tmp_path: Path, content: bytes, needle: str) -> None:
    model = _touch(tmp_path / "m.safetensors")
    (tmp_path / "m.civitai.info").write_bytes(content)
    info = read_sidecar_info(model)
    assert info.trained_words == () and info.base_model is None and info.sources == ()
    assert any(needle in w and "m.civitai.info" in w for w in info.warnings)


def test_oversized_and_unreadable_sidecars_are_skipped(tmp_path: Path) -> None:
    model = _touch(tmp_path / "m.safetensors")
    with open(tmp_path / "m.cm-info.json", "wb") as fh:
        fh.truncate(SIDECAR_CAP + 1)
    (tmp_path / "m.civitai.info").mkdir()
    info = read_sidecar_info(model)
    assert info.sources == ()
    assert any("over the" in w for w in info.warnings)
    assert any("m.civitai.info" in w and "cannot be read" in w for w in info.warnings)
    assert read_sidecar_info(tmp_path / "absent.safetensors").warnings == ()


def test_png_helper_is_a_real_png() -> None:
    pytest.importorskip("PIL")
    from PIL import Image

    with Image.open(io.BytesIO(_png())) as img:
        assert img.size == (2, 2)
