"""Full-file hashes as A1111 and Civitai show them, read once per file version and kept.

- ``sha256``: the whole file's SHA-256. A1111's checkpoint "Model hash" (Civitai's AutoV2) is its
  first 10 hex digits; two files with the same SHA-256 are duplicates.
- ``addnet``: for a ``.safetensors`` file, the SHA-256 of the bytes after its header (the
  ``8 + N`` bytes that hold the header's length and its JSON). A1111 writes the first 12 hex digits
  of this one in "Lora hashes" for safetensors LoRAs (``use_addnet_hash``; Civitai's AutoV3), and
  the full file's for other LoRA files. Both are computed in the same single read when asked for.

:class:`HashStore` answers from memory, then from the library's sqlite cache
(:class:`~core.library.cache.InspectCache`, keyed by real path, size and ``mtime_ns``), and reads
the file only when neither knows this version of it; what it reads goes back into both. Reading
is chunked into one reused buffer (memory stays bounded whatever the file's size), checks
``check`` between chunks (stop) and may advise the kernel to drop the pages it read
(``drop_cache``: a background pass over a 200 GB library should not evict the models in use).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.files.leases import open_input
from core.library.cache import InspectCache

CHUNK = 4 << 20
Opener = Callable[[Path], BinaryIO]


@dataclass(frozen=True)
class FileDigest:
    sha256: str
    addnet: str | None = None  # None: not computed (not a .safetensors file, or not asked for)

    @property
    def autov2(self) -> str:
        """A1111's "Model hash" of a checkpoint: the first 10 hex digits of the file's SHA-256."""
        return self.sha256[:10]

    @property
    def lora_hash(self) -> str:
        """A1111's "Lora hashes" value: 12 hex digits, of the data after the header for safetensors."""
        return (self.addnet or self.sha256)[:12]


def wants_addnet(path: Path) -> bool:
    """A1111 hashes a LoRA's data without its header when the name ends in ``.safetensors``."""
    return path.name.lower().endswith(".safetensors")


def _open(path: Path) -> BinaryIO:
    return open_input(path)


def hash_stream(
    f: BinaryIO,
    *,
    addnet: bool = False,
    check: Callable[[], None] | None = None,
    drop_cache: bool = False,
    chunk: int = CHUNK,
) -> FileDigest:
    """Hash ``f`` from its start in one pass; ``addnet`` also hashes what follows a safetensors
    header (a file shorter than its header claims gives the hash of nothing, as A1111's seek does)."""
    full = hashlib.sha256()
    data = hashlib.sha256() if addnet else None
    skip = -1  # bytes still to skip before the addnet hash starts; -1: length not read yet
    buf = bytearray(chunk)
    view = memoryview(buf)
    head = b""
    offset = 0
    fd = _fileno(f) if drop_cache else None
    while True:
        n = f.readinto(buf)  # type: ignore[attr-defined]
        if not n:
            break
        part = view[:n]
        full.update(part)  # releases the GIL: the GUI thread runs while a chunk hashes
        if data is not None:
            if skip < 0:
                head += bytes(part[: 8 - len(head)])
                if len(head) == 8:
                    skip = 8 + int.from_bytes(head, "little")
            if skip >= 0:
                start = max(0, skip - offset)
                if start < n:
                    data.update(part[start:])
        offset += n
        if fd is not None:
            _drop(fd, offset - n, n)
        if check is not None:
            check()
    return FileDigest(full.hexdigest(), data.hexdigest() if data is not None else None)


def _fileno(f: BinaryIO) -> int | None:
    try:
        return f.fileno()
    except (OSError, AttributeError, ValueError):
        return None


def _drop(fd: int, offset: int, length: int) -> None:
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, offset, length, os.POSIX_FADV_DONTNEED)


def mostly_holes(st: os.stat_result) -> bool:
    """A sparse placeholder (a demo file, a preallocated download): under a quarter of its size is
    on disk. Its hash says nothing useful; the background pass skips it."""
    blocks = getattr(st, "st_blocks", None)
    return blocks is not None and st.st_size > (1 << 20) and blocks * 512 < st.st_size // 4


class HashStore:
    """Hashes by (real path, size, mtime_ns): memory, then ``cache``, then one read of the file.

    Thread-safe: the background hasher and a generation may ask at once (each then reads; the
    last answer stored wins, and both are the same). ``reads`` counts files read (tests).
    """

    def __init__(self, cache: InspectCache | None = None, *, opener: Opener = _open) -> None:
        self.cache = cache
        self._opener = opener
        self._known: dict[tuple[str, int, int], FileDigest] = {}
        self._lock = threading.Lock()
        self.reads = 0

    @staticmethod
    def _key(path: Path) -> tuple[str, int, int]:
        st = os.stat(path)
        return os.path.realpath(path), st.st_size, st.st_mtime_ns

    def known(self, path: Path, *, addnet: bool = False) -> FileDigest | None:
        """The digest of the file as it is now, if memory or the cache has it (never reads it)."""
        try:
            key = self._key(path)
        except OSError:
            return None
        return self._lookup(key, addnet)

    def _lookup(self, key: tuple[str, int, int], addnet: bool) -> FileDigest | None:
        with self._lock:
            found = self._known.get(key)
        if found is None and self.cache is not None:
            row = self.cache.get_hash(*key)
            if row is not None:
                found = FileDigest(*row)
                with self._lock:
                    self._known[key] = found
        if found is None or (addnet and found.addnet is None):
            return None
        return found

    def digest(
        self,
        path: Path,
        *,
        addnet: bool = False,
        check: Callable[[], None] | None = None,
        drop_cache: bool = False,
    ) -> FileDigest:
        """The file's digest, read only when not known. ``addnet`` asks for the safetensors data
        hash too (ignored for other names). Raises OSError when the file cannot be read."""
        path = Path(path)
        addnet = addnet and wants_addnet(path)
        key = self._key(path)
        found = self._lookup(key, addnet)
        if found is not None:
            return found
        with self._lock:
            self.reads += 1
        with self._opener(path) as f:
            digest = hash_stream(f, addnet=addnet, check=check, drop_cache=drop_cache)
        try:
            if self._key(path) != key:  # rewritten while it was read: keep nothing
                return digest
        except OSError:
            return digest
        with self._lock:
            self._known[key] = digest
        if self.cache is not None:
            self.cache.put_hash(*key, digest.sha256, digest.addnet)
        return digest
