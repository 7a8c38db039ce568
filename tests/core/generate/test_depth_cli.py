"""``loadout preprocess depth --model FILE`` and ``--controlnet FILE:PICTURE:depth`` with
``--preprocessor-model``: the map made on the fly is the one the command writes (the generation's
picture is the same as with that file), a pickle is refused in words, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from tests.fixtures.controlnets import tiny_controlnet_file
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.depth_anything import depth_files
from tests.fixtures.drawn import landscape


def _rgb(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_depth_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], demo_library_at: DemoAt
) -> None:
    files = depth_files(tmp_path)
    house = landscape(tmp_path / "house.png", 64, 64)
    depth = tmp_path / "depth.png"
    small = ["--set", "resolution=140"]
    assert (
        main(["preprocess", "depth", str(house), "-o", str(depth), "--model", str(files["original"]), *small])
        == 0
    )
    made = _rgb(depth)
    assert made.shape == (64, 64, 3) and made.min() == 0 and made.max() == 255
    bad = tmp_path / "bad.png"
    assert main(["preprocess", "depth", str(house), "-o", str(bad), "--model", str(files["pickle"])]) != 0
    err = capsys.readouterr().err
    assert "only as safetensors" in err and "Traceback" not in err and not bad.exists()

    demo = demo_library_at(tmp_path / "demo")
    cn = tiny_controlnet_file(tmp_path / "control_tiny_depth.safetensors")

    def make(control: str, out: Path, *extra: str) -> np.ndarray:
        args = [
            "generate", str(demo.checkpoint), "--prompt", "a house", "--seed", "2", "--steps", "2",
            "--size", "64x64", "--controlnet", control, "-o", str(out), "--quiet", *extra,
        ]  # fmt: skip
        assert main(args) == 0, capsys.readouterr().err
        return _rgb(out)

    # the generation runs the preprocessor at its default settings: the file written with those is
    # what its picture must equal
    default = tmp_path / "depth518.png"
    assert (
        main(["preprocess", "depth", str(house), "-o", str(default), "--model", str(files["transformers"])])
        == 0
    )
    fly = make(
        f"{cn}:{house}:depth:0.9", tmp_path / "fly.png", "--preprocessor-model", str(files["transformers"])
    )
    assert np.array_equal(fly, make(f"{cn}:{default}:0.9", tmp_path / "given518.png"))
    assert not np.array_equal(fly, make(f"{cn}:{depth}:0.9", tmp_path / "given140.png"))  # the map matters
    args = ["generate", str(demo.checkpoint), "--prompt", "x", "--steps", "1", "--size", "64x64"]
    none = tmp_path / "none.png"
    assert main([*args, "--controlnet", f"{cn}:{house}:depth", "-o", str(none), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "needs a Depth Anything V2 model file" in err and "Traceback" not in err and not none.exists()
