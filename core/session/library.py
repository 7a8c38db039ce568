"""The session's library: the index of the folders the user scans (kept between rescans)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from core.detect.types import Detection
from core.errors import LoadoutError
from core.library import Entry, InspectCache, LibraryIndex, ModelRoot, ScanProgress, roots_for


class Library:
    def __init__(self, cache: InspectCache | None = None) -> None:
        self.cache = cache
        self.index: LibraryIndex | None = None
        self.problems: list[str] = []

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
