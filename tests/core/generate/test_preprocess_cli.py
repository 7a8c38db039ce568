"""``loadout preprocess`` and ``--controlnet FILE:PICTURE:canny``: the hint made on the fly is the one
the command writes, the picture is the same as with that file, and the PNG names the module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.workflows import ControlNetParameters, controlnets_in
from core.preprocess import preprocess
from tests.fixtures.controlnets import tiny_controlnet_file
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.drawn import landscape


def _rgb(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_preprocess_writes_the_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    house = landscape(tmp_path / "house.png", 96, 64)
    out = tmp_path / "edges.png"
    assert main(["preprocess", "lineart", str(house), "-o", str(out), "--set", "sigma=2"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert np.array_equal(_rgb(out), preprocess("lineart", _rgb(house), {"sigma": 2}))
    assert main(["preprocess", "depth", str(house), "-o", str(tmp_path / "d.png")]) != 0
    err = capsys.readouterr().err
    assert "needs a Depth Anything V2 model file" in err and "Traceback" not in err
    assert not (tmp_path / "d.png").exists()


def test_a_controlnet_hint_made_on_the_fly_equals_the_written_one(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    demo_library_at: DemoAt,
) -> None:
    demo = demo_library_at(tmp_path / "demo")
    cn = tiny_controlnet_file(tmp_path / "control_tiny_canny.safetensors")
    house = landscape(tmp_path / "house.png", 64, 64)
    hint = tmp_path / "hint.png"
    assert main(["preprocess", "canny", str(house), "-o", str(hint)]) == 0

    def make(control: str, out: Path) -> np.ndarray:
        args = [
            "generate", str(demo.checkpoint), "--prompt", "a house", "--seed", "2", "--steps", "2",
            "--size", "64x64", "--controlnet", control, "-o", str(out), "--quiet",
        ]  # fmt: skip
        assert main(args) == 0, capsys.readouterr().err
        return _rgb(out)

    fly = make(f"{cn}:{house}:canny:0.9", tmp_path / "fly.png")
    given = make(f"{cn}:{hint}:0.9", tmp_path / "given.png")
    assert np.array_equal(fly, given)
    items = controlnets_in(parse_parameters(read_png_parameters(tmp_path / "fly.png")).extra)
    assert items == (ControlNetParameters(cn.stem, 0.9, 0.0, 1.0, "canny"),)
    assert (
        controlnets_in(parse_parameters(read_png_parameters(tmp_path / "given.png")).extra)[0].module
        == "none"
    )
