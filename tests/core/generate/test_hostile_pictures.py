"""Dropping (or --init-ing) a hostile picture: a clear error or the text, never a crash or a decode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from core.errors import FileFormatError, LoadoutError
from core.files.png_text import MAX_TEXT_BYTES, read_picture_header
from core.generate.command import read_picture
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from tests.fixtures.png_files import itext, text, write_png, ztext

PARAMS = "a castle\nSteps: 20, Sampler: Euler, CFG scale: 7, Seed: 42, Size: 512x512"


@pytest.mark.parametrize(("w", "h"), [(100_000, 100_000), (2**31 - 1, 1), (13_000, 13_000)])
def test_a_huge_picture_gives_its_text_without_decoding_a_pixel(tmp_path: Path, w: int, h: int) -> None:
    """Pillow refuses these as decompression bombs (or decodes 13000^2 just to read the text)."""
    png = write_png(tmp_path / "big.png", text("parameters", PARAMS), width=w, height=h, pixels=False)
    assert read_png_parameters(png) == PARAMS
    assert (read_picture_header(png).width, read_picture_header(png).height) == (w, h)


@pytest.mark.parametrize("size", [MAX_TEXT_BYTES + 1, 8 << 20])
def test_an_oversized_text_chunk_is_skipped_and_said(tmp_path: Path, size: int) -> None:
    png = write_png(tmp_path / "t.png", text("parameters", "x" * size))
    with pytest.raises(FileFormatError) as err:
        read_png_parameters(png)
    assert "over the 1 MiB limit" in err.value.message


def test_a_zlib_bomb_in_a_text_chunk_is_not_inflated(tmp_path: Path) -> None:
    png = write_png(
        tmp_path / "z.png",
        ztext("parameters", b"\0" * (64 << 20)),
        itext("x", "y" * (32 << 20), compressed=True),
    )
    assert len(png.read_bytes()) < 1 << 20
    header = read_picture_header(png)
    assert header.text == {} and len(header.skipped) == 2


def test_compressed_and_unicode_text_is_read(tmp_path: Path) -> None:
    png = write_png(tmp_path / "u.png", itext("parameters", "ünï " + PARAMS, compressed=True))
    assert read_png_parameters(png) == "ünï " + PARAMS


def test_out_of_range_values_are_ignored_with_the_reason() -> None:
    p = parse_parameters(
        "p <lora:a:1e308> <lora:b:0.5>\nSteps: 99999999999999999999, Sampler: Euler, CFG scale: nan, "
        "Seed: -5, Size: 100000x64, Denoising strength: 7, Distilled CFG Scale: inf"
    )
    assert set(p.ignored) == {"Steps", "CFG scale", "Seed", "Size", "Denoising strength",
                              "Distilled CFG Scale", "<lora:a>"}  # fmt: skip
    assert "from 1 to 10000" in p.ignored["Steps"] and "finite" in p.ignored["CFG scale"]
    assert (p.steps, p.cfg, p.seed, p.width, p.denoise, p.guidance) == (20, 7.0, 0, 512, None, None)
    assert [lo.name for lo in p.loras] == ["b"]


@pytest.mark.parametrize(("w", "h"), [(5000, 5000), (100_000, 100_000), (20_000, 8)])
def test_init_pictures_go_through_the_size_limit_before_decoding(tmp_path: Path, w: int, h: int) -> None:
    png = write_png(tmp_path / "init.png", width=w, height=h, pixels=False)
    with pytest.raises(LoadoutError) as err:
        read_picture(png)
    assert err.value.code == "bad_argument" and "too large" in err.value.message


def test_an_init_picture_is_a_writable_array(tmp_path: Path) -> None:
    path = tmp_path / "ok.png"
    Image.new("RGB", (16, 8), (10, 20, 30)).save(path)
    rgb = read_picture(path)
    assert rgb.shape == (8, 16, 3) and rgb.flags.writeable and np.all(rgb[0, 0] == (10, 20, 30))


@pytest.mark.parametrize(
    "data",
    [b"\x89PNG\r\n\x1a\n", b"\x89PNG\r\n\x1a\n\xff\xff\xff\xffIHDR", b"GIF89a" + b"\0" * 20, b"\xff\xd8\xff"],
)
def test_broken_pictures_are_file_format_errors(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bad.png"
    path.write_bytes(data)
    with pytest.raises(LoadoutError):
        read_png_parameters(path)
    with pytest.raises(LoadoutError):
        read_picture(path)
