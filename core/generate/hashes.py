"""File hashes as A1111 and Civitai show them, computed once per file version.

``Model hash`` is the first 10 hex digits of the file's SHA-256 ("AutoV2"); LoRA hashes are the
first 12 ("short hash"). Hashing a 6 GB checkpoint takes seconds, so results are kept by
(path, size, modification time) for the life of the process, and can be persisted by the caller.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

_CHUNK = 8 << 20


class FileHashes:
    """A small cache of full-file SHA-256 digests keyed by (path, size, mtime)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()

    def sha256(self, path: Path, check: Callable[[], None] | None = None) -> str:
        st = os.stat(path)
        key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._known:
                return self._known[key]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
                if check is not None:
                    check()
        digest = h.hexdigest()
        with self._lock:
            self._known[key] = digest
        return digest

    def model_hash(self, path: Path) -> str:
        return self.sha256(path)[:10]

    def lora_hash(self, path: Path) -> str:
        return self.sha256(path)[:12]
