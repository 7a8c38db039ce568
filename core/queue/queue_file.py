"""The queue file's owner lock and its errors (see :mod:`core.queue.store`)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from core.errors import FileAccessError

try:
    import fcntl
except ImportError:  # Windows: every store is its file's owner
    fcntl = None  # type: ignore[assignment]


class QueueFileError(FileAccessError):
    """The queue file could not be read or written (full disk, read-only folder, held elsewhere)."""

    code = "queue_file"


def store_error(path: object, exc: sqlite3.Error | OSError) -> QueueFileError:
    text = str(exc)
    low = text.lower()
    if "full" in low:
        fix = "Free some space on that disk, then try again"
    elif "locked" in low or "busy" in low:
        fix = "Another program holds the queue file; close it (or wait for it) and try again"
    elif "readonly" in low or "read-only" in low or "permission" in low:
        fix = "Make the data folder writable, then try again"
    else:
        fix = "Try again; if it keeps failing, move the queue file away to start with an empty queue"
    return QueueFileError(f"the queue file {path} could not be used", why=text, fix=fix)


class Owner:
    """An exclusive lock on ``FILE.lock`` with the owner's process id in it (see the module notes)."""

    def __init__(self, path: Path) -> None:
        self.path = path.with_name(path.name + ".lock")
        self.fd: int | None = None
        self.other_pid = 0
        if fcntl is None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                self.other_pid = int(os.pread(fd, 32, 0).split()[0] or 0)
            except (OSError, ValueError, IndexError):
                self.other_pid = -1
            self.other_pid = self.other_pid or -1
            os.close(fd)
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    @property
    def owner(self) -> bool:
        return self.other_pid == 0

    def __del__(self) -> None:  # a store dropped unclosed (a crash in a test) lets the file go too
        self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None
