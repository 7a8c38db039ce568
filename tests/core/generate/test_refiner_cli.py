"""The SDXL refiner hand-off end to end: tiny SDXL base and refiner checkpoint files (real layouts),
``loadout generate --refiner``, the manager swapping base and refiner through a small simulated card."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from core.errors import LoadoutError
from core.generate.command import generate_files
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.workflow_request import RefinerUse
from tests.fixtures.sdxl_tiny import write_sdxl_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_sdxl_pair(tmp_path_factory.mktemp("sdxl"))


def _make(base: Path, out: Path, refiner: RefinerUse | None, limit: int | None = None) -> np.ndarray:
    settings = ImageSettings("a red fox", "blurry", Sampling(seed=5, steps=4), 64, 64, refiner=refiner)
    result = generate_files(
        GenerateRequest(ModelFiles(checkpoint=base), settings, output=out, vram_limit=limit)
    )
    with Image.open(result.images[0].path) as im:
        return np.asarray(im.convert("RGB"))


def test_refiner_from_the_command_line(
    pair: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, refiner = pair
    out = tmp_path / "r.png"
    code = main(
        [
            "generate", str(base), "--prompt", "a red fox", "--negative", "blurry", "--seed", "5",
            "--steps", "4", "--size", "64x64", "--refiner", str(refiner), "--refiner-switch", "0.5",
            "--vram-limit", "64MiB",
            "-o", str(out), "--json",
        ]
    )  # fmt: skip
    stdout, err = capsys.readouterr()
    assert code == 0, err
    events = json.loads(stdout)["events"]
    assert any(e["model"].startswith(refiner.stem) and e["role"] == "diffusion_model" for e in events)
    p = parse_parameters(read_png_parameters(out))
    assert re.fullmatch(rf"{refiner.stem} \[[0-9a-f]{{10}}\]", p.extra["Refiner"])  # A1111's short hash
    assert p.extra["Refiner switch at"] == "0.5"


def test_the_refined_picture_is_the_same_on_any_card(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, refiner = pair
    use = RefinerUse(refiner, 0.5)
    plain = _make(base, tmp_path / "plain.png", None)
    whole = _make(base, tmp_path / "whole.png", use)
    assert not np.array_equal(whole, plain)
    for limit in (16 << 20,):  # base and refiner swap through the card and stream
        assert np.array_equal(_make(base, tmp_path / f"{limit}.png", use, limit), whole)


def test_a_refiner_that_is_not_one_is_refused(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, _ = pair
    with pytest.raises(LoadoutError) as err:
        _make(base, tmp_path / "x.png", RefinerUse(base, 0.5))
    assert err.value.code == "wrong_kind"
