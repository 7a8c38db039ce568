"""A grid's picture: the cells' pictures in rows with each X label underneath and each Y label at the
left (a Z value's name before it), saved atomically with the first cell's PNG text. The queue draws
one when a Z's last cell is done; a grid on the session at hand draws its own at the end."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from core.files.atomic import atomic_write_bytes
from core.generate.png import png_bytes


@dataclass(frozen=True)
class Placed:
    """One cell as the grid's picture shows it: its place, its labels and its picture (None: blank)."""

    x: int
    y: int
    labels: tuple[str, str, str]
    image: Path | None


def grid_png(
    cells: Sequence[tuple[Path | None, str]],
    path: Path,
    parameters: str,
    *,
    columns: int | None = None,
    row_labels: Sequence[str] = (),
) -> Path:
    """The cells in rows of ``columns`` (default: one row) with each label underneath and, when
    given, a label at the left of each row (an X/Y grid's Y values); a cell without a picture (None)
    stays blank. Saved atomically as ``path``."""
    images = [np.asarray(Image.open(p).convert("RGB")) if p is not None else None for p, _ in cells]
    first = next(i for i in images if i is not None)
    h, w = first.shape[:2]
    band = max(18, h // 10)
    cols = columns or len(cells)
    rows = -(-len(cells) // cols)
    left = max(48, w // 3) if row_labels else 0
    grid = Image.new("RGB", (left + w * cols, (h + band) * rows), (24, 26, 32))
    draw = ImageDraw.Draw(grid)
    for i, (img, (_, label)) in enumerate(zip(images, cells, strict=True)):
        x, y = left + (i % cols) * w, (i // cols) * (h + band)
        if img is not None:
            grid.paste(Image.fromarray(img), (x, y))
        draw.text((x + 6, y + h + band // 4), label, fill=(230, 232, 238))
    for r, label in enumerate(row_labels):
        draw.text((6, r * (h + band) + h // 2), label, fill=(230, 232, 238))
    atomic_write_bytes(path, png_bytes(np.asarray(grid), parameters))
    return path


def draw_cells(cells: Sequence[Placed], path: Path, parameters: str) -> Path | None:
    """The grid of one Z value's cells (those without a picture blank), or None when none has one."""
    done = {(c.x, c.y): c for c in cells if c.image is not None}
    if not done:
        return None
    xs = 1 + max(c.x for c in cells)
    ys = 1 + max(c.y for c in cells)
    labels_x = {c.x: c.labels[0] for c in cells}
    labels_y = {c.y: c.labels[1] for c in cells}
    grid: list[tuple[Path | None, str]] = []
    for iy in range(ys):
        for ix in range(xs):
            c = done.get((ix, iy))
            grid.append((c.image if c is not None else None, labels_x.get(ix, "")))
    rows = [labels_y.get(iy, "") for iy in range(ys)] if any(labels_y.values()) else []
    z = next(iter(done.values())).labels[2]
    if z and rows:
        rows = [f"{z} {r}" for r in rows]
    return grid_png(grid, path, parameters, columns=xs, row_labels=rows)
