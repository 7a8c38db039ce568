"""Where pictures are saved: ``-o OUT.png`` for the command line, numbered files for the window.

The window saves as A1111 does, so people find their pictures where they expect them:
``<output folder>/<YYYY-MM-DD>/<NNNNN>-<seed>.png`` with a counter one above the highest in that
folder. Nothing is ever overwritten, even by another process numbering the same folder at the
same moment: numbered pictures are written with ``replace=False`` (:mod:`core.files.atomic`), and a
number another writer took meanwhile is replaced by :func:`next_free`. A grid's folder is made with
:func:`new_folder`, which never hands two writers the same folder.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
from collections.abc import Iterator
from pathlib import Path

from core.files.atomic import OutputExists, write_error

try:
    import fcntl
except ImportError:  # Windows: a grid folder's earlier pictures are checked, no lock
    fcntl = None  # type: ignore[assignment]

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
    highest = _highest(day)
    return [day / f"{highest + 1 + i:05d}-{seed}.png" for i, seed in enumerate(seeds)]


def _highest(day: Path) -> int:
    highest = -1
    try:
        names = os.listdir(day)
    except OSError:
        return highest
    for name in names:
        m = _NUMBERED.match(name)
        if m:
            highest = max(highest, int(m.group(1)))
    return highest


def next_free(taken: Path) -> Path:
    """The name to use instead of the numbered picture ``taken`` (another writer got it): the same
    seed with the number after the highest in the folder now."""
    m = _NUMBERED.match(taken.name)
    rest = taken.name[m.end() :] if m else taken.name
    return taken.with_name(f"{max(_highest(taken.parent), int(m.group(1)) if m else -1) + 1:05d}-{rest}")


def new_folder(parent: Path, name: str) -> Path:
    """A new, empty folder ``parent/name`` (``name-2``, ``name-3``... when that exists), made
    exclusively: two writers asking at once get two folders."""
    parent.mkdir(parents=True, exist_ok=True)
    for i in range(1, 10_000):
        folder = parent / (name if i == 1 else f"{name}-{i}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"no free folder name for {parent / name}")


_GRID_FILE = re.compile(r"^(x\d+-y\d+-z\d+(-\d+)?|grid(-z\d+)?)\.png$")


@contextlib.contextmanager
def grid_folder(folder: Path) -> Iterator[Path]:
    """Hold ``folder`` for one grid while it runs: refused (before any work) when another program
    is writing a grid into it or an earlier grid's pictures are there, so no grid's picture is
    ever overwritten by another's. The hold is a lock on ``folder/.loadout-grid.lock`` (released
    by the system if the program dies; the file is removed when the grid is done)."""
    lock = folder / ".loadout-grid.lock"
    fd = _hold(folder, lock)
    try:
        found = sorted(n for n in os.listdir(folder) if _GRID_FILE.match(n))
        if found:
            shown = ", ".join(found[:3]) + (" ..." if len(found) > 3 else "")
            raise OutputExists(
                f"{folder} already holds a grid's pictures ({shown})",
                why="Loadout does not overwrite them",
                fix="Choose another folder for this grid, or move those pictures away",
            )
        yield folder
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # while still held: a waiting writer sees another file and tries again
        os.close(fd)


def _hold(folder: Path, lock: Path) -> int:
    """The locked descriptor of ``lock`` (the file that is at that name once it is held)."""
    while True:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise write_error(folder, exc) from None
        if fcntl is None:
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise OutputExists(
                f"another grid is being written into {folder}",
                fix="Choose another folder for this grid, or wait for the other one to finish",
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except OSError:
            same = False
        if same:
            return fd
        os.close(fd)  # its holder removed it as we opened it: take the new one
