"""A LoRA strength sweep: the same seed and prompt at several strengths of one LoRA, side by side
(the X/Y grid artists make in A1111 and Forge to see what a LoRA does at 0.4, 0.7 and 1.0).

Between cells the strength changes through the session's live path: on the CPU the LoRA runs as
low-rank side paths beside the baked weights (nothing is re-baked), on a device the mover
re-patches only the weights that LoRA touches. The text-encoder strength follows the model
strength (as an A1111 ``<lora:name:s>`` tag does) unless ``clip`` is fixed or the sweep is "model
only" (``text_encoder=False``: the LoRA's text-encoder strength stays as it is on the stack), and the
conditioning is re-encoded only when it changes. Each cell's label says which (``style 0.7 (model &
TE)``, ``style 0.7 (model; TE 1)``). Afterwards the LoRA's strengths are put back as they were.

A side path computes ``W x + s (up (down x))`` rather than ``(W + s up down) x``: the same picture to
float precision, not to the bit, so a sweep cell and a plain picture at that strength can differ in
the last bits of some pixels. Each cell is saved as its own PNG with its parameters, and the grid
as one more picture with the strengths written under each cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from core.errors import InterruptedByUser, LoadoutError
from core.files.atomic import atomic_write_bytes
from core.generate.events import GeneratedImage, GenerateProgress, GenerateResult
from core.generate.png import png_bytes
from core.values import LORA_STRENGTH

Generate = Callable[[int, Callable[[GenerateProgress], None]], GenerateResult]  # (cell index, progress)


@dataclass(frozen=True)
class Sweep:
    lora_id: str
    strengths: tuple[float, ...]
    clip: float | None = None  # None: the text-encoder strength follows each cell's model strength
    #: False: "model only", the text-encoder strength stays as it is on the stack (``clip`` unset)
    text_encoder: bool = True

    def __post_init__(self) -> None:
        if not 2 <= len(self.strengths) <= 12:
            raise LoadoutError(
                f"a sweep needs 2 to 12 strengths, not {len(self.strengths)}",
                fix="Give strengths like 0.4, 0.7, 1.0",
                code="bad_argument",
            )
        for value in self.strengths:
            LORA_STRENGTH.check(value)
        if self.clip is not None:
            LORA_STRENGTH.check(self.clip)


def parse_strengths(text: str) -> tuple[float, ...]:
    """``0.4, 0.7, 1.0`` -> strengths, each checked as a LoRA strength (:data:`LORA_STRENGTH`)."""
    found = tuple(LORA_STRENGTH.parse(v) for v in text.replace(";", ",").split(",") if v.strip())
    if not found:
        raise LORA_STRENGTH.error(f"the sweep {text!r} holds no strength; give them like 0.4,0.7,1.0")
    return found


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


def run_sweep(
    sweep: Sweep,
    name: str,
    original: tuple[float, float],
    set_strength: Callable[[float, float], None],
    generate_cell: Generate,
    progress: Callable[[GenerateProgress], None],
) -> GenerateResult:
    """Generate one cell per strength (``set_strength`` then ``generate_cell``), restore the original
    strengths whatever happens, and add the grid picture."""
    results: list[GenerateResult] = []
    count = len(sweep.strengths)

    def clip_at(s: float) -> float:
        if sweep.clip is not None:
            return sweep.clip
        return s if sweep.text_encoder else original[1]

    try:
        for i, s in enumerate(sweep.strengths):
            set_strength(s, clip_at(s))

            def cell_progress(p: GenerateProgress, i: int = i) -> None:
                progress(replace(p, image=i, images=count))

            results.append(generate_cell(i, cell_progress))
    except InterruptedByUser as exc:
        exc.written = tuple(str(img.path) for r in results for img in r.images)
        raise
    finally:
        set_strength(*original)
    cells: list[GeneratedImage] = []
    for r, s in zip(results, sweep.strengths, strict=True):
        for image in r.images[:1]:
            both = sweep.clip is None and sweep.text_encoder
            target = "model & TE" if both else f"model; TE {clip_at(s):g}"
            cells.append(replace(image, label=f"{name} {s:g} ({target})", role="cell"))
    first = cells[0]
    grid_path = first.path.with_name(f"{first.path.stem}-grid.png")
    grid_png([(c.path, c.label) for c in cells], grid_path, first.infotext)
    grid = GeneratedImage(grid_path, first.parameters, first.infotext, f"{name} sweep", role="grid")
    steps = [r.seconds_per_step for r in results]
    seconds = {k: sum(r.seconds.get(k, 0.0) for r in results) for k in results[0].seconds}
    return GenerateResult(
        (grid, *cells),
        results[0].seed,
        sorted(steps)[len(steps) // 2],
        seconds,
        max(r.peak_bytes for r in results),
        tuple(e for r in results for e in r.events),
        tuple(dict.fromkeys(n for r in results for n in r.notes)),
    )
