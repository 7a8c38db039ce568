"""A grid as queue jobs, and its pictures: one PNG per cell, one labelled grid per Z value, drawn
(by :mod:`core.queue.grid_picture`) when the last cell of that Z is done."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from core.generate.hashes import FileHashes
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest
from core.queue.grid import Axis, cells
from core.queue.grid_picture import Placed, draw_cells
from core.queue.job import Job, with_hashes

try:
    import fcntl
except ImportError:  # Windows: the earlier-pictures check only
    fcntl = None  # type: ignore[assignment]
from core.queue.store import JobStore, QueuedJob


def grid_jobs(
    base: GenerateRequest,
    folder: Path,
    x: Axis,
    y: Axis | None = None,
    z: Axis | None = None,
    *,
    grid: str = "grid",
    hashes: FileHashes | None = None,
    check: Callable[[], None] | None = None,
) -> list[Job]:
    """One job per cell, writing ``folder/x{X}-y{Y}-z{Z}.png``; the grids ``folder/grid.png`` (one Z)
    or ``folder/grid-z{Z}.png``."""
    hashes = hashes or FileHashes()
    zs = len(z.values) if z is not None else 1
    jobs = []
    for c in cells(base, x, y, z):
        request = replace(c.request, output=folder / f"x{c.x}-y{c.y}-z{c.z}.png", output_is_folder=False)
        grid_file = folder / ("grid.png" if zs == 1 else f"grid-z{c.z}.png")
        cell = {"lora_strengths": c.lora_strengths, "grid": grid, "x": c.x, "y": c.y, "z": c.z}
        jobs.append(with_hashes(request, hashes, check, labels=c.labels, grid_file=grid_file, **cell))
    return jobs


def grid_cells(store: JobStore, job: Job) -> list[QueuedJob]:
    """The cells of ``job``'s Z grid, as the queue holds them."""
    return [q for q in store.jobs() if q.job.grid == job.grid and q.job.grid_file == job.grid_file]


def draw_grid(cells_: list[QueuedJob], path: Path) -> Path | None:
    """The labelled grid of the finished cells (the others blank), or None when none is finished."""
    placed = [
        Placed(q.job.x, q.job.y, q.job.labels, q.images[0] if q.state == "done" and q.images else None)
        for q in cells_
    ]
    first = next((p.image for p in placed if p.image is not None), None)
    return draw_cells(placed, path, read_png_parameters(first)) if first is not None else None


def draw_finished_grid(store: JobStore, job: Job) -> Path | None:
    """Draw ``job``'s Z grid when none of its cells is queued or running any more."""
    if not job.grid or job.grid_file is None:
        return None
    mine = grid_cells(store, job)
    if any(q.state in ("queued", "running") for q in mine):
        return None
    return draw_grid(mine, job.grid_file)
