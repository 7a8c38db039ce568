"""Small files written atomically: a temporary file beside the target, fsynced, then renamed over it.

A crash, an interrupt or a full disk leaves the target as it was (absent or the old file) and removes
the temporary file. Large tensor files use :mod:`core.files.writer`, which streams tensor by tensor.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from core.errors import FileAccessError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as exc:
        raise FileAccessError(
            f"cannot write {path}",
            why=exc.strerror or str(exc),
            fix="Choose a folder you can write to",
            code="write_failed",
        ) from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise FileAccessError(
            f"cannot write {path}",
            why="the disk is full" if full else (exc.strerror or str(exc)),
            fix="Free some space and try again" if full else "Choose a folder you can write to",
            code="disk_full" if full else "write_failed",
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
