"""A result says what each picture is (a picture, a sweep's grid, a grid's cell): the window shows a
sweep by that, never by matching its label (a LoRA or a file named "...sweep" is not a sweep)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.generate.events import GeneratedImage, GenerateResult
from core.generate.parameters import GenerationParameters, format_parameters
from core.generate.png import save_png
from core.generate.sweep import Sweep, run_sweep


def _cell(folder: Path):  # type: ignore[no-untyped-def]
    def cell(i: int, _progress) -> GenerateResult:  # type: ignore[no-untyped-def]
        p = GenerationParameters(prompt="x", seed=1)
        rgb = np.full((8, 8, 3), 40 * i, np.uint8)
        path = save_png(folder / f"sweep-{i}.png", rgb, format_parameters(p))
        image = GeneratedImage(path, p, format_parameters(p), label=path.stem)
        return GenerateResult((image,), 1, 0.1, {}, 0)

    return cell


def test_a_sweep_result_names_its_grid_and_cells(tmp_path: Path) -> None:
    sweep = Sweep("a", (0.4, 1.0))
    result = run_sweep(sweep, "my sweep", (1.0, 1.0), lambda m, c: None, _cell(tmp_path), print)
    assert [i.role for i in result.images] == ["grid", "cell", "cell"]
    assert result.images[0].path.name.endswith("-grid.png")


def test_plain_pictures_are_pictures_whatever_their_label(tmp_path: Path) -> None:
    plain = _cell(tmp_path)(1, None)
    assert plain.images[0].label.endswith("sweep-1") and plain.images[0].role == "picture"
