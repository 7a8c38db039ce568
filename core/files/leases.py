"""The files a long-lived front end (the window) keeps memory-mapped, each held under a read lease.

:class:`~core.files.guard.FileGuard` protects one command; the window maps checkpoints, diffusion
models, text encoders, VAEs, LoRAs, ControlNets and upscale models for as long as they stay loaded.
:class:`MappedFiles` is the bookkeeping for that: one ``O_RDONLY`` descriptor of its own per file
(leases belong to an open file description, so the loader's descriptor cannot carry it), a Linux
read lease on it where one can be taken, and the file's size and mtime when it was taken.

- With a lease, another program that opens the file for writing or truncates it is held by the
  kernel (up to ``/proc/sys/fs/lease-break-time``) and this process gets SIGIO. The front end's
  handler asks :meth:`MappedFiles.breaking` which files those are, marks them
  (:meth:`MappedFiles.mark`), stops the running task and, on the thread that owns the models,
  unloads what was mapped from them before :meth:`MappedFiles.release`: only then does the other
  program go on, and nothing reads the mapping any more.
- Without a lease (another OS, a file of another user, a network file system),
  :meth:`MappedFiles.changed` compares each file's size and mtime now with those when it was held,
  so the next task is refused before it touches a changed mapping.

Thread-safe: descriptors are added on the worker thread, the SIGIO handler reads them in the
main thread. No signal handling here (that is the front end's, in its main thread).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import stat
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import FileAccessError, FileChangedError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

#: whether this platform has read leases at all
LEASES = fcntl is not None and hasattr(fcntl, "F_SETLEASE")


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip


def _open_fd(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """A blocking read-only descriptor of ``path`` and its stat, whatever it is. Opened with
    ``O_NONBLOCK`` so that a FIFO without a writer (or a device) cannot block the open; the
    descriptor's own type is then checked, and only a regular file is made blocking again."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if _NONBLOCK and stat.S_ISREG(st.st_mode) and fcntl is not None:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def special_kind(st: os.stat_result) -> str | None:
    """What a non-regular, non-folder file is, in words (None for a regular file or a folder)."""
    for test, words in _KINDS:
        if test(st.st_mode):
            return words
    return None if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) else "not a regular file"


def not_a_file(path: str | os.PathLike[str], kind: str) -> FileAccessError:
    return FileAccessError(
        f"{path} is not a regular file",
        why=f"it is {kind}, which Loadout does not read (it could wait forever for a writer)",
        fix="Give the path of a file on disk",
        code="not_a_file",
    )


def unreadable(path: str | os.PathLike[str], exc: OSError) -> FileAccessError:
    """A path that cannot be opened or stat'ed, in words for its cause."""
    if exc.errno == errno.ELOOP:
        why, fix = "it is a symbolic link that leads back to itself (a loop)", "Point the link at a file"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        why, fix = exc.strerror or str(exc), "Check the file's permissions"
    elif exc.errno == errno.ENAMETOOLONG:
        why, fix = "its name is too long for the file system", "Give a shorter path"
    else:
        why, fix = exc.strerror or str(exc), "Check the path and that the disk is readable"
    return FileAccessError(f"{path} cannot be read", why=why, fix=fix, code="unreadable")


def open_regular(path: Path) -> tuple[int, os.stat_result] | None:
    """A read-only descriptor of ``path`` and its stat when it is an existing regular file; None
    otherwise (a missing or special file is its reader's error to give). Never blocks."""
    try:
        fd, st = _open_fd(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def open_input(path: str | os.PathLike[str]) -> io.BufferedReader:
    """The one way Loadout opens a file it reads (models, LoRAs, pictures, sidecars): a binary
    reader of a regular file, opened so that it cannot block. A FIFO, device or socket is
    :func:`not_a_file` (``not_a_file``); a folder is ``IsADirectoryError`` and any other failure
    the ``OSError`` of ``open()``, so each reader's own words for those stay."""
    try:
        fd, st = _open_fd(path)
    except OSError:  # a socket cannot be opened at all (ENXIO): say what it is
        try:
            kind = special_kind(os.stat(path))
        except OSError:
            kind = None
        if kind is not None:
            raise not_a_file(path, kind) from None
        raise
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    kind = special_kind(st)
    if kind is not None:
        os.close(fd)
        raise not_a_file(path, kind)
    return os.fdopen(fd, "rb")


def read_input(path: str | os.PathLike[str]) -> bytes:
    """The whole of a small input file (:func:`open_input`)."""
    with open_input(path) as fh:
        return fh.read()


def take_lease(fd: int) -> bool:
    """A read lease on ``fd`` (False where none can be taken: not Linux, not the owner, NFS...)."""
    if not LEASES:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError:
        return False
    return True


def sigio_handled() -> bool:
    """Whether this process handles SIGIO: a lease break sends it, and its default action ends the
    process, so without a handler no lease is taken (size checks only)."""
    if not hasattr(signal, "SIGIO"):
        return False
    return signal.getsignal(signal.SIGIO) not in (signal.SIG_DFL, None)


def lease_breaking(fd: int) -> bool:
    """Whether another program is waiting for the lease on ``fd`` to go (a write or truncation)."""
    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GETLEASE) == fcntl.F_UNLCK)
    except OSError:
        return False


def unloaded_error(paths: Sequence[Path]) -> FileChangedError:
    """What the artist reads when loaded files changed: they were unloaded, load them again later."""
    names = list(dict.fromkeys(Path(p).name for p in paths))
    said = f"{names[0]} was" if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]} were"
    return FileChangedError(
        f"{said} changed on disk while loaded; Loadout unloaded {'it' if len(names) == 1 else 'them'}",
        fix="Load it again when the other program is done",
        code="model_file_changed",
    )


@dataclass(frozen=True)
class _Held:
    fd: int
    size: int
    mtime_ns: int
    leased: bool


class MappedFiles:
    """The files a front end keeps mapped (see the module notes). ``leases`` False: size checks only
    (where the front end cannot take SIGIO, or a test takes leases away)."""

    def __init__(self, *, leases: bool = True) -> None:
        self.leases = leases and LEASES
        self._lock = threading.Lock()
        self._held: dict[Path, _Held] = {}
        self._marked: set[Path] = set()

    def held(self) -> dict[Path, bool]:
        """Each held file and whether it is under a lease."""
        with self._lock:
            return {p: h.leased for p, h in self._held.items()}

    def hold(self, paths: Iterable[Path | None]) -> None:
        """Hold each existing regular file of ``paths`` not held yet (before it is mapped, where
        possible: a truncation between the map and the lease would go unseen)."""
        for path in paths:
            if path is None:
                continue
            key = Path(path).resolve()
            with self._lock:
                if key in self._held:
                    continue
            opened = open_regular(key)
            if opened is None:
                continue  # a missing file is the loader's error to give
            fd, st = opened
            held = _Held(fd, st.st_size, st.st_mtime_ns, self.leases and sigio_handled() and take_lease(fd))
            with self._lock:
                if key in self._held:  # held meanwhile by another thread
                    os.close(fd)
                else:
                    self._held[key] = held

    def keep_only(self, paths: Iterable[Path]) -> None:
        """Release every held file not among ``paths`` (the files mapped now) and not marked."""
        keep = {Path(p).resolve() for p in paths}
        with self._lock:
            gone = [p for p in self._held if p not in keep and p not in self._marked]
        self.release(gone)

    def release(self, paths: Iterable[Path]) -> None:
        """Let go of ``paths`` (call once nothing is mapped from them): a waiting writer goes on."""
        for path in paths:
            with self._lock:
                held = self._held.pop(Path(path).resolve(), None)
                self._marked.discard(Path(path).resolve())
            if held is not None:
                with contextlib.suppress(OSError):
                    os.close(held.fd)

    def release_all(self) -> None:
        with self._lock:
            paths = list(self._held)
        self.release(paths)

    def breaking(self) -> list[Path]:
        """The held files whose lease another program is breaking (from the SIGIO handler)."""
        with self._lock:
            held = list(self._held.items())
        return [p for p, h in held if h.leased and lease_breaking(h.fd)]

    def changed(self) -> list[Path]:
        """The held files whose size or mtime is no longer what it was when held (any file: a lease
        broken by the kernel's timeout shows here too)."""
        with self._lock:
            held = list(self._held.items())
        out = []
        for path, h in held:
            try:
                st = os.fstat(h.fd)
            except OSError:
                continue
            if (st.st_size, st.st_mtime_ns) != (h.size, h.mtime_ns):
                out.append(path)
        return out

    def mark(self, paths: Iterable[Path]) -> None:
        """Note files found changing; :meth:`take_marked` hands them to the thread that unloads."""
        with self._lock:
            self._marked.update(Path(p).resolve() for p in paths)

    def take_marked(self) -> list[Path]:
        """The files marked or changed since held (each once): to unload, then :meth:`release`."""
        found = self.changed()
        with self._lock:
            out = sorted(self._marked | set(found))
            self._marked.clear()
        return out
