"""``loadout generate --x ... [--y ...] [--z ...] [--ray ADDRESS|local:N] -o DIR``: a grid through the
queue, in-process or on a Ray cluster, and its ``--json`` report (the contract in docs/cli.md)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InterruptedByUser
from core.files.destination import check_output_folder
from core.generate.hashes import FileHashes
from core.generate.naming import grid_folder
from core.generate.request import GenerateRequest
from core.loading.assign import interrupt_check
from core.queue.cluster_support import ray_pool_module
from core.queue.grid import Axis
from core.queue.grid_jobs import grid_jobs
from core.queue.runner import LocalPool, Pool, QueueRunner
from core.queue.store import JobStore, Totals
from core.queue.worker import Worker


@dataclass(frozen=True)
class GridReport:
    images: list[str]
    grids: list[str]
    cells: list[dict[str, Any]]
    workers: dict[str, dict[str, int]]
    failed: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"images": self.images, "grids": self.grids, "cells": self.cells, "workers": self.workers}


def local_pool(
    request: GenerateRequest, interrupt: threading.Event | None = None, hashes: FileHashes | None = None
) -> LocalPool:
    worker = Worker(
        "local", device=request.device, vram_limit=request.vram_limit, interrupt=interrupt, hashes=hashes
    )
    return LocalPool(worker)


@contextlib.contextmanager
def cluster_pool(
    address: str, request: GenerateRequest, interrupt: threading.Event | None = None
) -> Iterator[Pool]:
    """Workers on the Ray cluster at ``address`` (``local:N`` starts one here and stops it after);
    each worker looks for the request's files where the client has them too (folders of the hints).
    ``interrupt`` ends the wait for a cluster that does not answer."""
    ray_pool = ray_pool_module()  # a plain-words ClusterUnavailable when Ray is not installed
    count = ray_pool.connect(address, stop=interrupt.is_set if interrupt is not None else lambda: False)
    folders = list(
        dict.fromkeys(p.resolve().parent for p in (*request.models.paths, *(a.path for a in request.loras)))
    )
    pool = ray_pool.RayPool(count, roots=[folders] * count, vram_limit=request.vram_limit)
    try:
        yield pool
    finally:
        pool.close()
        if address.startswith("local:"):
            ray_pool.shutdown()


def run_grid(
    request: GenerateRequest,
    folder: Path,
    axes: tuple[Axis, Axis | None, Axis | None],
    *,
    pool: Pool | None = None,
    progress: Callable[[Totals], None] | None = None,
    interrupt: threading.Event | None = None,
) -> GridReport:
    """Every cell of the grid as a queued job, run on ``pool`` (default: in-process); ``interrupt``
    stops the running cells (nothing half-written) and raises InterruptedByUser."""
    check_output_folder(folder)  # before any work: /dev, a file, a name too long
    with grid_folder(folder):
        return _run_grid(request, folder, axes, pool, progress, interrupt)


def _stopped(store: JobStore) -> InterruptedByUser:
    """The stop of a grid, naming the cells' pictures that are on disk."""
    stopped = InterruptedByUser(
        "stopped", why="the running cells were stopped; no picture of theirs was written"
    )
    stopped.written = tuple(str(p) for q in store.jobs("done") for p in q.images if p.is_file())
    return stopped


def _run_grid(
    request: GenerateRequest,
    folder: Path,
    axes: tuple[Axis, Axis | None, Axis | None],
    pool: Pool | None,
    progress: Callable[[Totals], None] | None,
    interrupt: threading.Event | None,
) -> GridReport:
    check = interrupt_check(interrupt.is_set) if interrupt is not None else None
    hashes = FileHashes()
    jobs = grid_jobs(request, folder, *axes, check=check, hashes=hashes)
    store = JobStore()
    values = {a.name: a for a in axes if a is not None}
    store.add(jobs)
    # the worker's own flag, never the command's: a worker consumes a stop it acts on, and the
    # command's stop (a signal, a changed input) must stay seen until the whole grid has stopped
    pool = pool or local_pool(request, None, hashes)
    runner = QueueRunner(store, pool, on_update=progress)
    watcher = None
    if interrupt is not None:

        def watch() -> None:
            while not done.wait(0.1):
                if interrupt.is_set():
                    runner.stop()
                    return

        done = threading.Event()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    try:
        report = runner.run()
    finally:
        if watcher is not None:
            done.set()
            watcher.join()
    if report.stopped or (interrupt is not None and interrupt.is_set()):
        raise _stopped(store)
    names = [a.name if a is not None else None for a in axes]
    out_cells, images, failed = [], [], []
    for q in store.jobs():
        if q.state != "done":
            failed.append(f"cell x{q.job.x} y{q.job.y} z{q.job.z}: {q.error}")
            continue
        coords = {}
        for k, (name, idx) in enumerate(zip(names, (q.job.x, q.job.y, q.job.z), strict=True)):
            coords["xyz"[k]] = values[name].values[idx] if name is not None else None
        images += [str(p) for p in q.images]
        out_cells.append(
            {**coords, "image": str(q.images[0]), "worker": q.worker, "seconds": round(q.seconds, 4)}
        )
    grids = list(
        dict.fromkeys(
            str(q.job.grid_file) for q in store.jobs() if q.job.grid_file and q.job.grid_file.is_file()
        )
    )
    return GridReport(images, grids, out_cells, pool.stats(), failed)
