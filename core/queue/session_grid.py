"""A grid on the session at hand: the cells made one after another on the models already loaded,
in this process, without queue jobs or file hashes. A LoRA strength sweep (the window's sweep row,
``loadout generate --sweep``) is such a grid with one strength axis.

Between cells a strength changes through the session's live path: on the CPU the LoRA runs as
low-rank side paths beside the baked weights (nothing is re-baked), on a device the mover re-patches
only the weights that LoRA touches; afterwards the LoRA's strengths are put back as they were, baked.
The prompt is re-encoded only when the text-encoder strength changes. A side path computes
``W x + s (up (down x))`` rather than ``(W + s up down) x``: the same picture to float precision, not
to the bit, so a cell and a plain picture at that strength can differ in the last bits of some
pixels; a queued grid's cell (core.queue.worker) is made the same way and is the same file.

Each cell is saved as its own PNG with its parameters (``OUT-0.7.png`` beside ``-o OUT.png``, or
numbered in a folder), and each Z value's grid as one more picture named after its first cell
(``OUT-0.4-grid.png``). The result says what each picture is (``role``), never by its label.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from core.errors import InterruptedByUser, LoadoutError
from core.generate.command import open_request
from core.generate.events import GeneratedImage, GenerateProgress, GenerateResult
from core.generate.generator import Generator
from core.generate.naming import file_paths
from core.generate.request import GenerateRequest, ImageSettings
from core.generate.session_run import Output
from core.queue.grid import Axis, ImageCell, Strengths, Value, image_cells
from core.queue.grid_picture import Placed, draw_cells
from core.text.t5_tokenizer import T5TokenizerSearch


@dataclass(frozen=True)
class SessionGrid:
    """Up to three axes over the settings at hand; ``lora``: the stack entry a strength axis sets
    (None: the stack's first LoRA)."""

    x: Axis
    y: Axis | None = None
    z: Axis | None = None
    lora: str | None = None

    @property
    def axes(self) -> tuple[Axis, ...]:
        return tuple(a for a in (self.x, self.y, self.z) if a is not None)


def _value_text(v: Value | None, index: int) -> str:
    """A cell value as a file name part: numbers as written ("0.7"), plain names as they are, any
    other text (a prompt replacement) by its place."""
    text = f"{v:g}" if isinstance(v, float) else str(v)
    return text if re.fullmatch(r"[\w.+-]{1,40}", text) else str(index)


def _cell_output(output: Output, cell: ImageCell) -> Output:
    """``OUT.png`` -> ``OUT-<values>.png`` (``OUT-0.7.png``); a folder numbers its pictures itself."""
    if output.is_folder:
        return output
    path = output.path
    places = (cell.x, cell.y, cell.z)
    parts = [_value_text(v, i) for v, i in zip(cell.values, places, strict=True) if v is not None]
    return replace(output, path=path.with_name(f"{path.stem}-{'-'.join(parts)}{path.suffix or '.png'}"))


def grid_files(
    request: GenerateRequest,
    grid: SessionGrid,
    *,
    progress: Callable[[GenerateProgress], None] | None = None,
    interrupt: threading.Event | None = None,
    t5_search: T5TokenizerSearch | None = None,
) -> GenerateResult:
    """``loadout generate --sweep``: the request's models loaded, then :func:`run_session_grid`
    (every file name it will write is checked first)."""
    report = progress or (lambda p: None)
    names: list[Path] = []
    if not request.output_is_folder:
        plan = image_cells(request.image, (1.0, 1.0) if request.loras else None, grid.x, grid.y, grid.z)
        cells = [_cell_output(Output(request.output), c).path for c in plan]
        names = [p for c in cells for p in file_paths(c, request.image.batch)]
        names += [c.with_name(f"{c.stem}-grid.png") for c in cells]
    opened = open_request(request, report, interrupt=interrupt, t5_search=t5_search, outputs=names)
    result = run_session_grid(
        opened.generator, opened.image, grid, opened.output, report, opened.check, init=opened.init,
        dtype=opened.dtype,
    )  # fmt: skip
    return opened.finish(result)


def _target(generator: Generator, grid: SessionGrid) -> tuple[str, str, Strengths] | None:
    """The swept LoRA: (stack id, name, its (model, text encoder) strengths), None without a LoRA."""
    stack = generator.session.loras.stack
    entries = stack.entries if stack is not None else {}
    lora_id = grid.lora if grid.lora is not None else next(iter(entries), None)
    if lora_id is None:
        return None
    entry = entries.get(lora_id)
    if entry is None:
        raise LoadoutError(
            "that LoRA is not in the stack", fix="Add the LoRA to the stack, then sweep its strength",
            code="bad_argument",
        )  # fmt: skip
    return lora_id, entry.path.stem, (entry.model_strength, entry.clip_strength)


def run_session_grid(
    generator: Generator,
    image: ImageSettings,
    grid: SessionGrid,
    output: Output,
    progress: Callable[[GenerateProgress], None],
    check: Callable[[], None],
    *,
    init: np.ndarray | None = None,
    dtype: torch.dtype | None = None,
) -> GenerateResult:
    """Every cell of ``grid`` on ``generator``'s session, then a grid picture per Z value; a stop
    names the cells already written (``InterruptedByUser.written``)."""
    target = _target(generator, grid)
    lora_id, name, original = target if target is not None else ("", "", None)
    cells = image_cells(image, original, grid.x, grid.y, grid.z, lora=name)
    loras = generator.session.loras
    results: list[GenerateResult] = []
    moved = False
    try:
        for i, cell in enumerate(cells):
            if cell.lora_strengths is not None:
                loras.set_strength(lora_id, *cell.lora_strengths, bake=False)
                moved = True

            def cell_progress(p: GenerateProgress, i: int = i) -> None:
                progress(replace(p, image=i, images=len(cells)))

            where = _cell_output(output, cell)
            results.append(generator.generate(cell.image, where, cell_progress, check, init, dtype=dtype))
    except InterruptedByUser as exc:
        exc.written = tuple(str(img.path) for r in results for img in r.images)
        raise
    finally:
        if moved and original is not None:
            loras.set_strength(lora_id, *original, bake=True)  # the stack as it was, baked
    return grid_result(grid, cells, results)


def grid_result(
    grid: SessionGrid, cells: Sequence[ImageCell], results: Sequence[GenerateResult]
) -> GenerateResult:
    """The grid pictures first, then each cell's picture (the rest of a batch after them), with the
    cells' timings, events and notes together."""
    shown = [
        replace(r.images[0], label=" ".join(t for t in c.labels if t), role="cell")
        for c, r in zip(cells, results, strict=True)
    ]
    rest = [img for r in results for img in r.images[1:]]
    grids: list[GeneratedImage] = []
    for z in dict.fromkeys(c.z for c in cells):
        mine = [(c, img) for c, img in zip(cells, shown, strict=True) if c.z == z]
        first = mine[0][1]
        path = first.path.with_name(f"{first.path.stem}-grid.png")
        draw_cells([Placed(c.x, c.y, c.labels, img.path) for c, img in mine], path, first.infotext)
        title = " × ".join(a.name for a in grid.axes) + (f" {mine[0][0].labels[2]}" if grid.z else "")
        grids.append(GeneratedImage(path, first.parameters, first.infotext, f"{title} grid", role="grid"))
    steps = sorted(r.seconds_per_step for r in results)
    seconds = {k: sum(r.seconds.get(k, 0.0) for r in results) for k in results[0].seconds}
    return GenerateResult(
        (*grids, *shown, *rest),
        results[0].seed,
        steps[len(steps) // 2],
        seconds,
        max(r.peak_bytes for r in results),
        tuple(e for r in results for e in r.events),
        tuple(dict.fromkeys(n for r in results for n in r.notes)),
    )
