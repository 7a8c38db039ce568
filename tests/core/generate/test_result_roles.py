"""A result says what each picture is (a picture, a grid's picture, a grid's cell): the window shows a
sweep's grid by that, never by matching its label (a LoRA or a file named "...sweep" is not a sweep)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.generate.events import GeneratedImage, GenerateResult
from core.generate.parameters import GenerationParameters, format_parameters
from core.generate.png import save_png
from core.generate.request import ImageSettings
from core.queue.grid import axis_of, image_cells
from core.queue.session_grid import SessionGrid, grid_result


def _made(folder: Path, i: int) -> GenerateResult:
    p = GenerationParameters(prompt="x", seed=1)
    rgb = np.full((8, 8, 3), 40 * i, np.uint8)
    path = save_png(folder / f"sweep-{i}.png", rgb, format_parameters(p))
    image = GeneratedImage(path, p, format_parameters(p), label=path.stem)
    return GenerateResult((image,), 1, 0.1, {}, 0)


def test_a_sweep_result_names_its_grid_and_cells(tmp_path: Path) -> None:
    grid = SessionGrid(axis_of("lora-strength", "0.4, 1"))
    cells = image_cells(ImageSettings("x"), (1.0, 1.0), grid.x, lora="my sweep")
    result = grid_result(grid, cells, [_made(tmp_path, i) for i in range(2)])
    assert [i.role for i in result.images] == ["grid", "cell", "cell"]
    assert result.images[0].path.name == "sweep-0-grid.png" and result.images[0].path.is_file()
    assert [i.label for i in result.images[1:]] == ["my sweep 0.4", "my sweep 1"]  # labels are for people


def test_plain_pictures_are_pictures_whatever_their_label(tmp_path: Path) -> None:
    plain = _made(tmp_path, 1)
    assert plain.images[0].label.endswith("sweep-1") and plain.images[0].role == "picture"


def test_a_two_axis_grid_draws_its_cells_in_rows_and_labels_them_by_both_axes(tmp_path: Path) -> None:
    from PIL import Image

    grid = SessionGrid(axis_of("cfg", "4, 7"), axis_of("seed", "1, 2"))
    cells = image_cells(ImageSettings("x"), None, grid.x, grid.y)
    assert [(c.x, c.y, c.image.sampling.cfg, c.image.sampling.seed) for c in cells] == [
        (0, 0, 4.0, 1), (1, 0, 7.0, 1), (0, 1, 4.0, 2), (1, 1, 7.0, 2),
    ]  # fmt: skip
    result = grid_result(grid, cells, [_made(tmp_path, i) for i in range(4)])
    assert [i.label for i in result.images[1:]] == [
        "cfg 4 seed 1",
        "cfg 7 seed 1",
        "cfg 4 seed 2",
        "cfg 7 seed 2",
    ]
    with Image.open(result.images[0].path) as picture:
        width, height = picture.size
    assert (width, height) == (48 + 2 * 8, 2 * (8 + 18))  # Y labels, 2 columns; 2 rows of cell + label
