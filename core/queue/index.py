"""A worker's own model files, found by content: a job names each file by SHA-256 and size, with
the client's path as a hint, so machines with different folder layouts run the same jobs.

Only files of the right size are hashed (a stat is cheap, a hash of a 6 GB file is not), and each
file version is hashed once (:class:`~core.generate.hashes.FileHashes`, by path, size and mtime).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from core.errors import LoadoutError
from core.files.model_file import MODEL_EXTENSIONS
from core.generate.hashes import FileHashes
from core.queue.job import FileRef


class MissingFiles(LoadoutError):
    code = "missing_file"


class ModelIndex:
    def __init__(self, roots: Iterable[Path] = (), hashes: FileHashes | None = None) -> None:
        self.roots = tuple(Path(r) for r in roots)
        self.hashes = hashes or FileHashes()
        self._found: dict[str, Path] = {}

    def _candidates(self, ref: FileRef) -> Iterable[Path]:
        yield ref.path
        for root in self.roots:
            for folder, _, names in os.walk(root, followlinks=True):
                for name in names:
                    if Path(name).suffix.lower() in MODEL_EXTENSIONS:
                        yield Path(folder) / name

    def find(self, ref: FileRef) -> Path | None:
        """This machine's copy of ``ref`` (the hint first, then the roots), or None."""
        known = self._found.get(ref.sha256)
        if known is not None and known.is_file():
            return known
        for path in self._candidates(ref):
            try:
                if path.stat().st_size != ref.size or self.hashes.sha256(path) != ref.sha256:
                    continue
            except OSError:
                continue
            self._found[ref.sha256] = path
            return path
        return None

    def missing(self, refs: Iterable[FileRef]) -> list[FileRef]:
        return [r for r in refs if self.find(r) is None]

    def resolve(self, refs: Iterable[FileRef], worker: str) -> dict[str, Path]:
        """sha256 -> this machine's path for every ref; :class:`MissingFiles` names what is lacking."""
        refs = list(refs)
        lacking = self.missing(refs)
        if lacking:
            raise MissingFiles(
                f"worker {worker} does not have {lacking[0].path.name}",
                why=f"no file of {lacking[0].size} bytes with SHA-256 {lacking[0].sha256[:12]}... "
                "is in its model folders",
                fix="Copy the file into one of that machine's model folders, or let another worker run it",
            )
        return {r.sha256: self._found[r.sha256] for r in refs}
