"""``loadout generate`` with textual-inversion embeddings and clip skip, end to end on the demo's tiny
SD1 checkpoint (CLIP-L at its real width, 768): the PNG parameters A1111 writes (``TI hashes``,
``Clip skip``) and reads back; the embedding and the layer change the picture."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.generate.generator import Generator
from core.generate.parameters import EmbeddingUse, parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import Output
from core.queue.grid import parse_axis
from core.session.compose import headless_session
from tests.core.text.test_embeddings import write_a1111_pt
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("embeddings")
    write_a1111_pt(
        folder / "EasyNeg.pt", 0.05 * torch.randn(2, 768, generator=torch.Generator().manual_seed(3))
    )
    return folder


@pytest.fixture(scope="module")
def generator(demo: DemoLibrary, embeddings: Path) -> Generator:
    """One session for every picture (the window's): loading the demo once keeps the file fast."""
    session, _ = headless_session("cpu")
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    return Generator(session, embedding_folders=(embeddings,))


def _picture(generator: Generator, out: Path, negative: str = "", clip_skip: int | None = None) -> np.ndarray:
    settings = ImageSettings("a castle", negative, Sampling(seed=5, steps=1), 64, 64, clip_skip=clip_skip)
    result = generator.generate(settings, Output(out), lambda p: None, lambda: None)
    generator.notes = result.notes  # type: ignore[attr-defined]
    with Image.open(out) as im:
        return np.asarray(im.convert("RGB"))


def test_the_command_writes_ti_hashes_and_clip_skip_and_reads_them_back(
    demo: DemoLibrary, embeddings: Path, tmp_path: Path
) -> None:
    out = tmp_path / "a.png"
    args = ["generate", str(demo.checkpoint), "--prompt", "a castle", "--negative",
            "embedding:EasyNeg, blurry", "--embeddings", str(embeddings), "--clip-skip", "2", "--seed", "5",
            "--steps", "1", "--size", "64x64", "-o", str(out), "--quiet"]  # fmt: skip
    assert main(args) == 0
    text = read_png_parameters(out)
    digest = hashlib.sha256((embeddings / "EasyNeg.pt").read_bytes()).hexdigest()[:12]
    assert "Clip skip: 2" in text and f'TI hashes: "EasyNeg: {digest}"' in text
    p = parse_parameters(text)
    assert p.clip_skip == 2 and p.embeddings == (EmbeddingUse("EasyNeg", digest),)
    assert p.negative == "embedding:EasyNeg, blurry"


def test_the_embedding_changes_the_picture_by_either_name(generator: Generator, tmp_path: Path) -> None:
    named = _picture(generator, tmp_path / "a.png", "embedding:EasyNeg, blurry")
    bare = _picture(generator, tmp_path / "b.png", "easyneg, blurry")
    assert np.array_equal(bare, named)  # A1111's bare name is the same embedding
    missing = _picture(generator, tmp_path / "c.png", "embedding:Elsewhere, blurry")
    assert any("'Elsewhere' was not found" in n for n in generator.notes)  # type: ignore[attr-defined]
    assert "TI hashes" not in read_png_parameters(tmp_path / "c.png")
    assert not np.array_equal(missing, named)


def test_clip_skip_1_is_sd1s_own_layer_and_2_changes_the_picture(
    generator: Generator, tmp_path: Path
) -> None:
    plain = _picture(generator, tmp_path / "p.png")
    one = _picture(generator, tmp_path / "one.png", clip_skip=1)
    two = _picture(generator, tmp_path / "two.png", clip_skip=2)
    assert parse_parameters(read_png_parameters(tmp_path / "p.png")).clip_skip is None
    assert np.array_equal(plain, one)  # SD1 takes CLIP-L's last layer: A1111's clip skip 1
    assert not np.array_equal(plain, two)


def test_clip_skip_is_a_grid_axis_and_a_bad_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_axis("clip-skip:1,2").values == (1, 2)
    code = main(["generate", "x.safetensors", "--prompt", "a", "--clip-skip", "0", "-o", "x.png"])
    assert code != 0 and "clip skip" in capsys.readouterr().err
