"""A1111 infotext: written as A1111/Civitai read it, read back to the same parameters."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.errors import FileAccessError, FileFormatError, LoadoutError
from core.generate.hashes import FileHashes
from core.generate.parameters import (
    EmbeddingUse,
    GenerationParameters,
    LoraUse,
    format_parameters,
    parse_parameters,
)
from core.generate.png import read_png_parameters, save_png, to_uint8_rgb


def _params(**kw: object) -> GenerationParameters:
    base: dict[str, object] = dict(
        prompt="a castle on a hill, (golden hour:1.2)",
        negative="blurry, low quality",
        steps=25,
        sampler="dpmpp_2m",
        scheduler="karras",
        cfg=6.5,
        seed=1234567890123,
        width=832,
        height=1216,
        model="dreamshaper_8",
        model_hash="0123456789",
        loras=(LoraUse("style", 0.8, 0.8, "abcdef012345"), LoraUse("detail", 0.5, 1.0, "fedcba987654")),
    )
    base.update(kw)
    return GenerationParameters(**base)  # type: ignore[arg-type]


def test_the_text_is_what_a1111_writes() -> None:
    text = format_parameters(_params(), version="Loadout 0.1.0")
    lines = text.split("\n")
    assert lines[0] == "a castle on a hill, (golden hour:1.2) <lora:style:0.8> <lora:detail:1:0.5>"
    assert lines[1] == "Negative prompt: blurry, low quality"
    assert lines[2] == (
        "Steps: 25, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 6.5, Seed: 1234567890123, "
        'Size: 832x1216, Model hash: 0123456789, Model: dreamshaper_8, Lora hashes: "style: abcdef012345, '
        'detail: fedcba987654", Version: Loadout 0.1.0'
    )


@pytest.mark.parametrize(
    "params",
    [
        _params(),
        _params(negative="", loras=()),
        _params(prompt="line one\nline two: with colon, and comma", sampler="euler_ancestral"),
        _params(sampler="uni_pc", scheduler="sgm_uniform", denoise=0.55, guidance=3.5),
        _params(prompt="日本語のプロンプト, café, 🐱", negative="ünïcödé"),
    ],
)
def test_round_trip(params: GenerationParameters) -> None:
    assert parse_parameters(format_parameters(params, version="Loadout test")) == params


def test_reads_old_a1111_text_with_the_schedule_folded_into_the_sampler() -> None:
    text = (
        "masterpiece, 1girl <lora:add_detail:0.6>\nNegative prompt: worst quality\n"
        "Steps: 30, Sampler: DPM++ 2M Karras, CFG scale: 7, Seed: 5, Size: 512x768, "
        "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Clip skip: 2, ENSD: 31337"
    )
    p = parse_parameters(text)
    assert (p.sampler, p.scheduler, p.steps, p.seed, p.width, p.height) == (
        "dpmpp_2m",
        "karras",
        30,
        5,
        512,
        768,
    )
    assert p.prompt == "masterpiece, 1girl"
    assert p.loras == (LoraUse("add_detail", 0.6, 0.6, ""),)
    assert p.extra == {"ENSD": "31337"} and p.clip_skip == 2


def test_ti_hashes_and_clip_skip_round_trip_in_a1111s_form() -> None:
    p = GenerationParameters(
        prompt="embedding:EasyNegative castle", clip_skip=2,
        embeddings=(
            EmbeddingUse("EasyNegative", "c74b4e810b03"), EmbeddingUse("bad:hands,5", "0123456789ab"),
        ),
    )  # fmt: skip
    text = format_parameters(p)
    assert ", Clip skip: 2," in text
    assert 'TI hashes: "EasyNegative: c74b4e810b03, badhands5: 0123456789ab"' in text  # A1111 drops : and ,
    back = parse_parameters(text)
    assert back.clip_skip == 2 and back.extra == {}
    assert back.embeddings == (
        EmbeddingUse("EasyNegative", "c74b4e810b03"),
        EmbeddingUse("badhands5", "0123456789ab"),
    )
    assert parse_parameters(text.replace("Clip skip: 2", "Clip skip: 99")).ignored.keys() == {"Clip skip"}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("just a prompt", "Steps"),
    ],
)
def test_bad_text_says_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(LoadoutError, match="not generation parameters") as info:
        parse_parameters(text)
    assert why in info.value.message


def test_png_carries_the_parameters_and_is_written_atomically(tmp_path: Path) -> None:
    rgb = np.arange(8 * 16 * 3, dtype=np.uint8).reshape(8, 16, 3)
    out = tmp_path / "out" / "img.png"
    text = format_parameters(_params(prompt="ünïcödé"))
    save_png(out, rgb, text)
    assert read_png_parameters(out) == text
    with Image.open(out) as im:
        assert np.array_equal(np.asarray(im), rgb)
    assert [p.name for p in out.parent.iterdir()] == ["img.png"]  # no temporary file left


def test_reading_images_without_parameters_says_why(tmp_path: Path) -> None:
    plain = tmp_path / "plain.png"
    Image.new("RGB", (4, 4)).save(plain)
    with pytest.raises(FileFormatError, match="no generation parameters"):
        read_png_parameters(plain)
    comfy = tmp_path / "comfy.png"
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("prompt", "{}")
    Image.new("RGB", (4, 4)).save(comfy, pnginfo=info)
    with pytest.raises(FileFormatError) as err:
        read_png_parameters(comfy)
    assert "ComfyUI" in err.value.message
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"not an image at all")
    with pytest.raises(FileFormatError, match="not an image"):
        read_png_parameters(junk)
    with pytest.raises(FileAccessError):
        read_png_parameters(tmp_path / "missing.png")


def test_pixels_are_rounded_as_comfyui_saves_them() -> None:
    x = torch.tensor([-2.0, -1.0, 0.0, 0.999, 1.0, 3.0]).reshape(3, 1, 2)
    out = to_uint8_rgb(x)  # (1, 2, 3): HWC
    # clamp((x + 1) / 2, 0, 1) * 255, truncated
    assert out.transpose(2, 0, 1).reshape(-1).tolist() == [0, 0, 127, 254, 255, 255]


def test_hashes_are_a1111s_and_cached(tmp_path: Path) -> None:
    f = tmp_path / "m.safetensors"
    head = b'{"__metadata__":{"a":"b"}}'
    content = len(head).to_bytes(8, "little") + head + b"x" * 1000
    f.write_bytes(content)
    full = hashlib.sha256(content).hexdigest()
    hashes = FileHashes()
    assert hashes.model_hash(f) == full[:10]
    # A1111 hashes a safetensors LoRA without its header (use_addnet_hash): Civitai's AutoV3
    assert hashes.lora_hash(f) == hashlib.sha256(b"x" * 1000).hexdigest()[:12]
    f.write_bytes(b"y" * 1001)  # a new version of the file is hashed again
    assert hashes.sha256(f) == hashlib.sha256(b"y" * 1001).hexdigest()
    other = tmp_path / "m.ckpt"  # other formats: the whole file's
    other.write_bytes(content)
    assert hashes.lora_hash(other) == full[:12]


def test_batch_position_round_trips_as_a1111_writes_it() -> None:
    p = _params(extra={"Batch size": "4", "Batch pos": "2"})
    text = format_parameters(p)
    assert "Batch size: 4, Batch pos: 2" in text
    assert parse_parameters(text).extra == {"Batch size": "4", "Batch pos": "2"}
