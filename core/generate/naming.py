"""Where pictures are saved: ``-o OUT.png`` for the command line, numbered files for the window.

The window saves as A1111 does, so people find their pictures where they expect them:
``<output folder>/<YYYY-MM-DD>/<NNNNN>-<seed>.png`` with a counter one above the highest in that
folder. Nothing is ever overwritten.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

_NUMBERED = re.compile(r"^(\d{5,})-")


def file_paths(out: Path, count: int) -> list[Path]:
    """``out`` for one picture; ``out``, ``out-2``, ... (same suffix) for a batch."""
    out = Path(out)
    suffix = out.suffix or ".png"
    stem = out.stem if out.suffix else out.name
    return [out.with_name(f"{stem}{'' if i == 0 else f'-{i + 1}'}{suffix}") for i in range(count)]


def numbered_paths(folder: Path, seeds: list[int], *, today: _dt.date | None = None) -> list[Path]:
    """The next free ``NNNNN-seed.png`` names in today's sub-folder of ``folder``."""
    day = Path(folder) / (today or _dt.date.today()).isoformat()
    highest = -1
    if day.is_dir():
        for p in day.iterdir():
            m = _NUMBERED.match(p.name)
            if m:
                highest = max(highest, int(m.group(1)))
    return [day / f"{highest + 1 + i:05d}-{seed}.png" for i, seed in enumerate(seeds)]
