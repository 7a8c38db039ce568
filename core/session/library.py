"""The session's library: the index of the folders the user scans (kept between rescans), the
files' full-file hashes (:class:`HashStore`, over the same sqlite cache) and when each was used."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from core.detect.types import Detection
from core.errors import LoadoutError
from core.library import Entry, InspectCache, LibraryIndex, ModelRoot, ScanProgress, roots_for
from core.library.hasher import HashJob, plan_hashes
from core.library.hashes import FileDigest, HashStore


class Library:
    def __init__(self, cache: InspectCache | None = None) -> None:
        self.cache = cache
        self.index: LibraryIndex | None = None
        self.problems: list[str] = []
        self.hashes = HashStore(cache)

    def scan(
        self,
        folders: Sequence[str | Path],
        progress: Callable[[ScanProgress], None],
        check: Callable[[], None],
    ) -> Iterator[Entry]:
        """Index ``folders`` (installs, yaml files or plain folders); a rescan of the same roots
        reuses what the index already read."""
        problems: list[LoadoutError] = []
        roots: list[ModelRoot] = roots_for(folders, problems, plain_origin="folder")
        if self.index is None or self.index.roots != tuple(roots):
            self.index = LibraryIndex(roots, cache=self.cache)
        index = self.index
        try:
            yield from index.scan(progress=progress, check=check)
        finally:
            self.problems = [p.message for p in problems] + index.problems

    def detection(self, path: Path) -> Detection | None:
        """The scan's detection of ``path`` when the file is unchanged since (a load reuses it)."""
        return self.index.detection(path) if self.index is not None else None

    def hash_jobs(self) -> list[HashJob]:
        """The indexed files still without a full-file hash, in the order worth hashing them."""
        return plan_hashes(self.index.entries()) if self.index is not None else []

    def hashed(self, path: Path, digest: FileDigest) -> Entry | None:
        """Note a digest the hasher found; the updated entry (None: not in the index)."""
        if self.index is None or self.hashes.known(path) != digest:
            return None  # (the file changed while it was read: the next scan hashes it again)
        return self.index.update(path, sha256=digest.sha256, addnet=digest.addnet)

    def note_used(self, paths: Iterable[Path]) -> list[Entry]:
        """Record that ``paths`` were loaded or used for a picture now (kept in the cache); the
        index entries that changed."""
        now = time.time()
        changed: list[Entry] = []
        for path in paths:
            if self.cache is not None:
                self.cache.note_used(os.path.realpath(path), now)
            entry = self.index.update(path, last_used=now) if self.index is not None else None
            if entry is not None:
                changed.append(entry)
        return changed
