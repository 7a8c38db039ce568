"""The one way Loadout writes a file: a partial file beside the target, fsynced, renamed over it.

Every output (pictures, grids, merged and converted models) goes through :func:`atomic_file` (or
:class:`AtomicBatch` for several files that appear together), which promises:

- readers see the old file (or none) or the whole new one, never a half-written file;
- a crash, an interrupt (Ctrl-C, SIGTERM, :class:`~core.errors.InterruptedByUser`) or an error
  removes the partial file;
- the file gets the permissions of any file the user creates (``0666`` less the umask: ``0644``
  under umask 022), not ``mkstemp``'s ``0600``;
- running out of space at any point (``ENOSPC``/``EDQUOT``: the free-space check passed, then
  another writer filled the disk) is the ``disk_full`` error, never an internal error;
- with ``replace=False`` an existing file is never overwritten, not even by another process
  writing the same name at the same moment: the partial is *linked* to the target (``link(2)``
  fails when the name exists), so of two writers exactly one gets the name; the other renames
  (``taken``: the next free number) or gets the ``output_exists`` error;
- the partial is named ``.<target>.<pid>-<random>.partial`` and locked (``flock``) while written: a
  writer killed with SIGKILL leaves it behind, and the next write to that folder removes it (its
  lock is free: its writer is dead). The library never lists ``.partial`` files as models.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from core.errors import FileAccessError, LoadoutError

try:
    import fcntl
except ImportError:  # Windows: stale partials are found by their writer's pid alone
    fcntl = None  # type: ignore[assignment]

PARTIAL_SUFFIX = ".partial"
_PARTIAL = re.compile(r"^\..+\.(\d+)-[0-9a-f]{8}\.partial$")
#: a partial without a pid in its name (older versions' mkstemp names) is stale after this long
_OLD_PARTIAL_AGE = 24 * 3600
#: never sweep a partial younger than this (its writer may be between creating and locking it)
_MIN_AGE = 2.0
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_partial(name: str) -> bool:
    """Whether ``name`` is a writer's partial file (never a model, never listed)."""
    return name.startswith(".") and name.endswith(PARTIAL_SUFFIX)


def write_error(path: Path, exc: OSError) -> LoadoutError:
    """The error for a failed write of ``path``: ``disk_full`` for no space, else ``write_failed``."""
    if exc.errno in _FULL:
        return FileAccessError(
            f"cannot write {path}",
            why="the disk is full",
            fix="Free some space or choose another folder, and try again",
            code="disk_full",
        )
    return FileAccessError(
        f"cannot write {path}",
        why=exc.strerror or str(exc),
        fix="Choose a folder you can write to",
        code="write_failed",
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _stale(path: Path) -> bool:
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False
    if age < _MIN_AGE:
        return False
    m = _PARTIAL.match(path.name)
    if m is None:
        return age > _OLD_PARTIAL_AGE
    if fcntl is not None:  # the writer holds an exclusive lock until it ends; the kernel drops it at death
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # locked: its writer is alive
        finally:
            os.close(fd)
        return True
    return not _pid_alive(int(m.group(1)))


def sweep_stale_partials(folder: Path) -> list[Path]:
    """Remove the partial files of dead writers in ``folder``; returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if is_partial(entry.name) and entry.is_file(follow_symlinks=False) and _stale(Path(entry.path)):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _create_partial(target: Path) -> tuple[int, Path]:
    """A new locked partial beside ``target`` created with mode 0666 (the kernel applies the umask)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(target, exc) from None
    sweep_stale_partials(target.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL_SUFFIX}"
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(target, exc) from None
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, tmp
    raise FileAccessError(f"cannot write {target}", why="no free temporary name", code="write_failed")


class OutputExists(FileAccessError):
    """A file Loadout would not overwrite is already there (``replace=False``)."""

    code = "output_exists"


Taken = Callable[[Path], Path]


def _no_replace(tmp: Path, target: Path) -> None:
    """Give ``tmp`` the name ``target`` unless that name exists (FileExistsError), atomically
    across processes: a hard link, or where the file system has none, an exclusive create of the
    name followed by the rename over that empty file of our own."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def _put(tmp: Path, target: Path, replace: bool, taken: Taken | None) -> Path:
    """Rename ``tmp`` to ``target`` (see :func:`atomic_file`); returns the name it got."""
    if replace:
        os.replace(tmp, target)
        return target
    for _ in range(10_000):
        try:
            _no_replace(tmp, target)
            return target
        except FileExistsError:
            if taken is None:
                raise OutputExists(
                    f"{target} already exists",
                    why="Loadout does not overwrite it",
                    fix="Choose another name or an empty folder, or move the file away",
                ) from None
            target = taken(target)
    raise OutputExists(f"cannot find a free name for {target}", fix="Choose an empty folder")


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, replace: bool = True) -> Iterator[BinaryIO]:
    """Open a partial for ``path``; when the block ends normally it is fsynced and renamed over
    ``path``, otherwise removed. OSErrors (the disk filling up included) become :func:`write_error`."""
    target = Path(path)
    fd, tmp = _create_partial(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        with deferred_stop_signals():
            _put(tmp, target, replace, None)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(target, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, replace: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one
    (``replace=False``: never over an existing file, :class:`OutputExists`)."""
    with atomic_file(path, replace=replace) as out:
        out.write(data)


class AtomicBatch:
    """Several files that appear together or not at all (a batch of pictures): each is written to
    its partial by :meth:`write_bytes`; :meth:`commit` renames them all (Ctrl-C and SIGTERM wait
    until the renames are done); :meth:`abort` (or leaving the ``with`` block by an exception)
    removes every partial, so an interrupted batch writes nothing. ``replace=False``: no existing
    file is overwritten; a name taken meanwhile is renamed by ``taken`` (or :class:`OutputExists`),
    and :attr:`written` holds the names the files got."""

    def __init__(self, *, replace: bool = True, taken: Taken | None = None) -> None:
        self._pending: list[tuple[int, Path, Path]] = []  # (locked fd, partial, target)
        self.replace = replace
        self.taken = taken
        self.written: list[Path] = []

    def __enter__(self) -> AtomicBatch:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()

    def write_bytes(self, path: str | os.PathLike[str], data: bytes) -> None:
        target = Path(path)
        fd, tmp = _create_partial(target)
        self._pending.append((fd, tmp, target))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            self.abort()
            raise write_error(target, exc) from None

    def commit(self) -> list[Path]:
        done: list[Path] = []
        with deferred_stop_signals():
            try:
                for _, tmp, target in self._pending:
                    done.append(_put(tmp, target, self.replace, self.taken))
            except OutputExists:
                self._undo(done)
                raise
            except OSError as exc:
                self._undo(done)
                raise write_error(self._pending[len(done)][2], exc) from None
            finally:
                self._close()
        self.written = done
        return done

    def _undo(self, done: list[Path]) -> None:
        """All or nothing: the files already named go again (a batch never half-appears)."""
        if not self.replace:
            for path in done:
                with contextlib.suppress(OSError):
                    path.unlink()
        self.abort()

    def abort(self) -> None:
        for _, tmp, _ in self._pending:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._close()

    def _close(self) -> None:
        for fd, _, _ in self._pending:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pending = []


@contextlib.contextmanager
def deferred_stop_signals() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while a few renames finish, then handle them as they would have
    been (only in the main thread, where Python runs signal handlers; elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = [signal.SIGINT, *([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])]
    got: list[int] = []
    previous: dict[int, signal.Handlers | Callable[[int, FrameType | None], object] | int | None] = {}
    for sig in wanted:
        with contextlib.suppress(ValueError, OSError):  # not the main interpreter
            previous[sig] = signal.signal(sig, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for signum in got[:1]:
            held = previous.get(signum)
            if callable(held):
                held(signum, None)
            elif held == signal.SIG_DFL:
                os.kill(os.getpid(), signum)
