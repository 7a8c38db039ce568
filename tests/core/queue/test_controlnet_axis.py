"""The X/Y/Z grid's ``controlnet-strength`` axis on the demo's tiny SD1 checkpoint with a tiny real
SD1 ControlNet: each cell is the picture a plain generate makes at that strength (queued grid from
the command line, and a grid on the session at hand), the cell's PNG says the strength, and an
axis without a ControlNet is refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary
from core.errors import LoadoutError
from core.generate.command import generate_files
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.workflow_request import ControlNetUse
from core.generate.workflows import controlnets_in
from core.queue.grid import axis_of, image_cells
from core.queue.session_grid import SessionGrid, grid_files
from tests.fixtures.controlnets import tiny_controlnet_file
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.drawn import landscape


@pytest.fixture(scope="module")
def parts(
    tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt
) -> tuple[DemoLibrary, Path, Path]:
    folder = tmp_path_factory.mktemp("cn")
    demo = demo_library_at(folder / "demo")
    net = tiny_controlnet_file(folder / "control_tiny.safetensors")
    return demo, net, landscape(folder / "house.png", 64, 64)


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _plain(demo: DemoLibrary, net: Path, hint: Path, strength: float, out: Path) -> np.ndarray:
    settings = ImageSettings(
        "a house", sampling=Sampling(seed=2, steps=2), width=64, height=64,
        controlnets=(ControlNetUse(net, hint, strength),),
    )  # fmt: skip
    made = generate_files(GenerateRequest(ModelFiles(checkpoint=demo.checkpoint), settings, output=out))
    return _pixels(made.images[0].path)


def test_each_queued_cell_is_the_plain_picture_at_its_strength(
    parts: tuple[DemoLibrary, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, net, hint = parts
    out = tmp_path / "grid"
    code = main([
        "generate", str(demo.checkpoint), "--prompt", "a house", "--seed", "2", "--steps", "2",
        "--size", "64x64", "--controlnet", f"{net}:{hint}", "--x", "controlnet-strength:0.3,1.5",
        "-o", str(out), "--quiet",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    cells = [out / "x0-y0-z0.png", out / "x1-y0-z0.png"]
    high = _plain(demo, net, hint, 1.5, tmp_path / "plain.png")
    assert np.array_equal(_pixels(cells[1]), high)
    assert not np.array_equal(_pixels(cells[0]), high)  # the strength shows
    said = [controlnets_in(parse_parameters(read_png_parameters(c)).extra)[0].weight for c in cells]
    assert said == [0.3, 1.5]


def test_a_session_grid_cell_is_the_plain_picture_and_no_controlnet_is_refused(
    parts: tuple[DemoLibrary, Path, Path], tmp_path: Path
) -> None:
    demo, net, hint = parts
    settings = ImageSettings(
        "a house", sampling=Sampling(seed=2, steps=2), width=64, height=64,
        controlnets=(ControlNetUse(net, hint, 1.0),),
    )  # fmt: skip
    request = GenerateRequest(ModelFiles(checkpoint=demo.checkpoint), settings, output=tmp_path / "s.png")
    result = grid_files(request, SessionGrid(axis_of("controlnet-strength", "0.3, 1.5")))
    cells = [img for img in result.images if img.role == "cell"]
    assert [c.label for c in cells] == ["controlnet 0.3", "controlnet 1.5"]
    assert np.array_equal(_pixels(cells[0].path), _plain(demo, net, hint, 0.3, tmp_path / "p.png"))
    bare = ImageSettings("a house", width=64, height=64)
    with pytest.raises(LoadoutError, match="needs a ControlNet"):
        image_cells(bare, None, axis_of("controlnet-strength", "0.5"))
    with pytest.raises(LoadoutError, match=r"out of range"):
        axis_of("controlnet-strength", "0.5, 99")
