"""Guidance patches end to end on the demo's tiny SD1 checkpoint: ``--patch`` on the command line
runs as a pass through the session, the PNG names the patches and reads them back, and a patch the
model cannot take is refused in words before any picture is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.guidance import parse_patch
from tests.fixtures.demo_copy import DemoAt

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _generate(demo: DemoLibrary, out: Path, *patches: str) -> int:
    args = ["generate", str(demo.checkpoint), "--prompt", "a lighthouse", "--negative", "fog", "--seed", "3",
            "--steps", "2", "--size", "64x64", "-o", str(out), "--quiet"]  # fmt: skip
    for p in patches:
        args += ["--patch", p]
    return main(args)


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_patches_from_the_command_line_change_the_picture_and_come_back_from_its_png(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(demo, tmp_path / "plain.png") == 0
    assert _generate(demo, tmp_path / "pag.png", "pag:scale=2", "freeu_v2") == 0, capsys.readouterr().err
    assert not np.array_equal(_pixels(tmp_path / "plain.png"), _pixels(tmp_path / "pag.png"))
    text = read_png_parameters(tmp_path / "pag.png")
    assert 'Guidance patches: "pag(scale=2), freeu_v2(b1=1.3,b2=1.4,s1=0.9,s2=0.2)"' in text
    assert parse_parameters(text).patches == (parse_patch("pag:2"), parse_patch("freeu_v2"))
    assert "Guidance patches" not in (read_png_parameters(tmp_path / "plain.png") or "")


def test_a_patch_the_model_cannot_take_is_refused_before_any_picture(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _generate(demo, tmp_path / "slg.png", "slg") != 0
    err = capsys.readouterr().err
    assert "Skip Layer Guidance does not fit this diffusion model" in err and "Traceback" not in err
    assert not (tmp_path / "slg.png").exists()
    assert _generate(demo, tmp_path / "bad.png", "pag:scale=lots") != 0
    assert "--patch 'pag:scale=lots'" in capsys.readouterr().err
