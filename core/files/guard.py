"""Input files that change while in use: a clear error, never a SIGBUS death.

Model files are memory-mapped. If another program truncates one while it is mapped, touching a
page past the new end raises SIGBUS, which kills the process with no message (Python cannot catch
SIGBUS: the faulting instruction runs again as soon as a handler returns). So the file must not be
allowed to shrink under the mapping, and the engine must be told in time:

- On Linux, :class:`FileGuard` takes a *read lease* (``fcntl(F_SETLEASE, F_RDLCK)``) on each input
  file. A program that opens the file for writing or truncates it is then held by the kernel (up to
  ``/proc/sys/fs/lease-break-time``, 45 s by default) while this process gets SIGIO. The guard's
  handler finds the file whose lease is breaking and stops the work: it sets the engine's interrupt
  flag (checked between tensors, layers and steps) or, with no flag, raises
  :class:`~core.errors.FileChangedError` at once. The command removes its partial output, says
  "the file changed or was truncated while in use", and exits, which releases the lease: only
  then does the other program's truncation happen, after the last read of the mapping.
- Where no lease can be taken (another OS, a file owned by another user, a network file system),
  :meth:`FileGuard.check` compares each file's size with its size when watched, so a truncation
  that happened between two tensors is still an error rather than a crash; and ``convert`` reads
  tensors with plain file reads (a short read is the same error), never through a mapping.

Signal handlers run in the main thread only: the guard is for the command line's main thread. The
window, whose models stay mapped between tasks, holds its files with :mod:`core.files.leases`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from types import FrameType

from core.errors import FileChangedError
from core.files.leases import LEASES, lease_breaking, open_regular, take_lease

_LEASES = LEASES and hasattr(signal, "SIGIO")


def changed_error(path: Path) -> FileChangedError:
    return FileChangedError(
        f"{path} changed or was truncated while in use",
        why="another program wrote to the file while Loadout was reading it",
        fix="Let the other program finish (a download or a copy?), then run again",
    )


class FileGuard:
    """Watch input files for the length of a command (a context manager; see the module notes)."""

    def __init__(self, interrupt: threading.Event | None = None) -> None:
        self.interrupt = interrupt
        self.changed: Path | None = None
        #: files watched by their size only (no lease could be taken)
        self.unleased: list[Path] = []
        self._files: dict[Path, tuple[int, int]] = {}  # path -> (fd, size when watched)
        self._previous: object = None
        self._active = False

    def __enter__(self) -> FileGuard:
        if _LEASES and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGIO, self._on_signal)
            self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        for fd, _ in self._files.values():
            with contextlib.suppress(OSError):
                os.close(fd)  # releases the lease: a waiting writer goes on
        self._files.clear()
        if self._active:
            signal.signal(signal.SIGIO, self._previous)  # type: ignore[arg-type]
            self._active = False

    def watch(self, *paths: Path | None) -> None:
        """Guard each existing regular file among ``paths`` (others are left to their readers)."""
        for path in paths:
            if path is None or Path(path) in self._files:
                continue
            opened = open_regular(Path(path))
            if opened is None:
                continue  # a missing file is the loader's error to give
            fd, st = opened
            self._files[Path(path)] = (fd, st.st_size)
            leased = self._active and take_lease(fd)
            if not leased:
                self.unleased.append(Path(path))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        for path, (fd, _) in self._files.items():
            if lease_breaking(fd):
                self.changed = path
                break
        if self.changed is None:
            return  # a SIGIO of something else
        if self.interrupt is not None:
            self.interrupt.set()
        else:
            raise changed_error(self.changed)

    def check(self) -> None:
        """Raise :class:`FileChangedError` if a watched file is being changed or has shrunk."""
        if self.changed is None:
            for path, (fd, size) in self._files.items():
                try:
                    now = os.fstat(fd).st_size
                except OSError:
                    continue
                if now < size:
                    self.changed = path
                    break
        if self.changed is not None:
            raise changed_error(self.changed)
