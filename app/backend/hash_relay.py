"""The library's full-file hashes, computed on a thread of their own (never behind a load) and
relayed to the window in batches, as the scan's entries are."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.backend.messages import ScanBatch
from core.library import Entry
from core.library.hasher import BackgroundHasher, HashProgress
from core.library.hashes import FileDigest
from core.session.library import Library

SCAN_BATCH_INTERVAL = 0.1  # library entries are relayed in batches at most this often (seconds)


def _large(path: Path | None) -> bool:
    """A file that takes a while to hash (so the results held before it are shown first)."""
    try:
        return path is not None and path.stat().st_size >= 32 << 20
    except OSError:
        return False


class HashRelay:
    """Owns the :class:`BackgroundHasher` (``hasher``); ``post`` sends a snapshot to the GUI thread
    (the worker's ``post``, thread-safe)."""

    def __init__(self, library: Library, post: Callable[[object], None]) -> None:
        self._library = library
        self._post = post
        self._batch: list[Entry] = []
        self._lock = threading.Lock()
        self._last = 0.0
        self.hasher = BackgroundHasher(library.hashes, self._hashed, self._progress)

    def _hashed(self, path: Path, digest: FileDigest) -> None:
        """(On the hasher's thread; the index is locked.) Relayed in batches, as scan results."""
        entry = self._library.hashed(path, digest)
        if entry is None:
            return
        with self._lock:
            self._batch.append(entry)
            if time.monotonic() - self._last < SCAN_BATCH_INTERVAL:
                return
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            batch, self._batch = self._batch, []
            self._last = time.monotonic()
        if batch:
            self._post(ScanBatch(tuple(batch)))

    def _progress(self, p: HashProgress) -> None:
        """Before a large file (seconds of hashing) or at the end, what is held is shown."""
        with self._lock:
            due = time.monotonic() - self._last >= SCAN_BATCH_INTERVAL
        if not p.running or due or _large(p.current):
            self._flush()
        self._post(p)
