"""The model library: every model file under the configured roots, read header-only and cached.

``LibraryIndex.scan()`` is a generator for a worker thread. It first lists the folders (no file is
opened; cached files come back filled in, the others ``pending``), yielding each entry as its
folder is listed, so a large folder is browsable at once; then it reads the pending files' headers
one by one, yielding each entry again as it fills in. ``progress`` is told where the scan is;
``check`` runs between folders and between files and raises (:class:`InterruptedByUser`) to stop.
A stopped scan leaves every entry consistent (``ok``, ``error`` or ``pending``) and every record
read so far in the cache.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from core.detect.sidecars import find_preview
from core.detect.types import Detection
from core.inspect import InspectResult, inspect_file
from core.library import query
from core.library.cache import InspectCache, cacheable
from core.library.entry import Entry, trim_record
from core.library.sources import ModelRoot, dedupe_roots
from core.library.walk import Listed, Walker

Phase = Literal["listing", "inspecting", "done"]
#: kinds whose detection a load can reuse (the others are never loaded as models)
LOADABLE_KINDS = frozenset({"checkpoint", "diffusion_model", "vae", "text_encoder"})


@dataclass(frozen=True)
class ScanProgress:
    """Where a scan is. While listing, ``total`` is 0 (unknown) and ``done`` counts files found.
    While inspecting, ``done`` of ``total`` headers are read; ``current`` is the file just read.
    ``cached`` files needed no reading. ``removed`` (first inspecting event): files gone since the
    last scan, dropped from the index."""

    phase: Phase
    done: int
    total: int
    current: Path | None = None
    cached: int = 0
    removed: tuple[Path, ...] = ()


Inspector = Callable[[Path], InspectResult]


class LibraryIndex:
    """The entries found under ``roots``, in listing order, filled in by :meth:`scan`.

    ``cache`` (optional) keeps inspect records between runs. ``inspect`` is the header reader
    (tests wrap it to count reads). Reading entries from another thread while a scan runs is
    safe: :meth:`entries` returns a snapshot.
    """

    def __init__(
        self,
        roots: Sequence[ModelRoot],
        cache: InspectCache | None = None,
        *,
        inspect: Inspector = inspect_file,
    ) -> None:
        self.roots = tuple(dedupe_roots(roots))
        self.cache = cache
        self._inspect = inspect
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._problems: list[str] = []
        # What each read entry was read from: a rescan reuses it while the file is unchanged.
        self._stamps: dict[str, Listed] = {}
        # Detections of loadable files read by this index, by path, with the (size, mtime) they
        # were read at: a load of the unchanged file reuses it instead of detecting again.
        self._detections: dict[str, tuple[int, int, Detection]] = {}
        self._cache_warnings_seen = 0  # cache warnings are reported once, by the scan after them

    # -- reading the index --------------------------------------------------------------------

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    def get(self, path: Path | str) -> Entry | None:
        with self._lock:
            return self._entries.get(str(path))

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def problems(self) -> list[str]:
        """What the last scan skipped and why (missing or unreadable folders, loops, cache trouble)."""
        with self._lock:
            return list(self._problems)

    def detection(self, path: Path | str) -> Detection | None:
        """The detection this index made of ``path``'s file, if the file is unchanged since (same
        size and modification time); None otherwise (read from the cache, changed, or not seen)."""
        with self._lock:
            known = self._detections.get(str(path))
        if known is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        size, mtime_ns, det = known
        return det if (st.st_size, st.st_mtime_ns) == (size, mtime_ns) else None

    def search(self, text: str) -> list[Entry]:
        return query.search(self.entries(), text)

    def filter(self, **kwargs: Any) -> list[Entry]:
        return query.filter_entries(self.entries(), **kwargs)

    # -- scanning -----------------------------------------------------------------------------

    def scan(
        self,
        progress: Callable[[ScanProgress], None] | None = None,
        check: Callable[[], None] | None = None,
    ) -> Iterator[Entry]:
        """List, then read headers; yields every entry when listed and again when filled in."""
        with self._lock:
            self._problems = []
        walker = Walker(self.roots, check)
        pending: list[tuple[Listed, Entry]] = []
        seen: dict[str, None] = {}  # listing order
        found = 0
        try:
            for batch in walker:
                for listed in batch:
                    entry = self._listed_entry(listed)
                    seen[str(listed.path)] = None
                    self._store(entry)
                    if entry.status == "pending":
                        pending.append((listed, entry))
                    found += 1
                    yield entry
                if progress is not None:
                    progress(ScanProgress("listing", found, 0, cached=found - len(pending)))
            removed = self._prune(seen)
            self._note(walker.problems)
            yield from self._read_pending(pending, found, removed, progress, check)
        finally:
            self._note(walker.problems)
            if self.cache is not None:
                self.cache.flush()
                self._note(self.cache.warnings[self._cache_warnings_seen :])
                self._cache_warnings_seen = len(self.cache.warnings)

    def _read_pending(
        self,
        pending: list[tuple[Listed, Entry]],
        found: int,
        removed: tuple[Path, ...],
        progress: Callable[[ScanProgress], None] | None,
        check: Callable[[], None] | None,
    ) -> Iterator[Entry]:
        cached = found - len(pending)
        total = len(pending)
        if progress is not None:
            progress(ScanProgress("inspecting", 0, total, cached=cached, removed=removed))
        for done, (listed, entry) in enumerate(pending, 1):
            if check is not None:
                check()
            entry = self._read(listed, entry)
            self._store(entry)
            yield entry
            if progress is not None:
                progress(ScanProgress("inspecting", done, total, listed.path, cached=cached))
        if progress is not None:
            progress(ScanProgress("done", total, total, cached=cached))

    def refresh(self, path: Path | str) -> Entry | None:
        """Read one indexed file again (after the user fixed it), bypassing the cache."""
        old = self.get(path)
        if old is None:
            return None
        listed = _relist(old)
        base = _base_entry(listed)
        entry = self._read(listed, base) if listed.error is None else _error_entry(base, listed)
        self._store(entry)
        if self.cache is not None:
            self.cache.flush()
        return entry

    # -- internals ----------------------------------------------------------------------------

    def _store(self, entry: Entry) -> None:
        with self._lock:
            self._entries[str(entry.path)] = entry

    def _note(self, messages: Iterable[str]) -> None:
        with self._lock:
            for message in messages:
                if message not in self._problems:
                    self._problems.append(message)

    def _prune(self, seen: dict[str, None]) -> tuple[Path, ...]:
        """After a complete listing: drop entries of files that are gone; put the rest in the new
        listing order (a file found again keeps its place from the last scan until then)."""
        with self._lock:
            removed = tuple(e.path for key, e in self._entries.items() if key not in seen)
            self._entries = {key: self._entries[key] for key in seen if key in self._entries}
            self._stamps = {key: v for key, v in self._stamps.items() if key in seen}
            self._detections = {key: v for key, v in self._detections.items() if key in seen}
        return removed

    def _listed_entry(self, listed: Listed) -> Entry:
        """The entry for a listed file: known, cached or pending, with its stored hash and
        last-used time (kept in the cache beside the records)."""
        entry = self._listed_record(listed)
        if self.cache is None or listed.error is not None:
            return entry
        stored = self.cache.get_hash(listed.real, listed.size, listed.mtime_ns)
        sha256, addnet = stored if stored is not None else (None, None)
        last_used = self.cache.last_used(listed.real)
        if (sha256, addnet, last_used) == (entry.sha256, entry.addnet, entry.last_used):
            return entry
        return replace(entry, sha256=sha256, addnet=addnet, last_used=last_used)

    def update(self, path: Path | str, **changes: Any) -> Entry | None:
        """Change fields of an indexed entry (a hash found, a use noted); the new entry, or None
        when ``path`` is not in the index."""
        with self._lock:
            entry = self._entries.get(str(path))
            if entry is None:
                return None
            entry = self._entries[str(path)] = replace(entry, **changes)
        return entry

    def _listed_record(self, listed: Listed) -> Entry:
        base = _base_entry(listed)
        if listed.error is not None:
            return _error_entry(base, listed)
        known = self._known(listed)
        if known is not None:
            return known
        if self.cache is None:
            return base
        record = self.cache.get(listed.real, listed.size, listed.mtime_ns, listed.sidecars)
        if record is None:
            return base
        try:
            return base.with_record(record, find_preview(listed.path, listed.siblings))
        except (KeyError, TypeError, ValueError, AttributeError):
            return base  # a record of the wrong shape: read the file again

    def _read(self, listed: Listed, entry: Entry) -> Entry:
        try:
            inspected = self._inspect(listed.path)
            record = trim_record(inspected.to_json())
        except Exception as exc:  # a detector bug must not stop the browser; shown on the row
            return entry.with_error(
                f"{listed.path.name} could not be inspected ({type(exc).__name__}: {exc}). "
                "Report it with this message",
                "inspect_failed",
            )
        preview = find_preview(listed.path, listed.siblings)
        filled = entry.with_record(record, preview)
        if cacheable(record) and _unchanged(listed):
            det = inspected.detection
            with self._lock:
                self._stamps[str(listed.path)] = listed
                if det is not None and det.kind in LOADABLE_KINDS:
                    self._detections[str(listed.path)] = (listed.size, listed.mtime_ns, det)
            if self.cache is not None:
                self.cache.put(listed.real, listed.size, listed.mtime_ns, listed.sidecars, record)
        return filled

    def _known(self, listed: Listed) -> Entry | None:
        """The entry this index already read from the file in this very state, if any (with its
        preview looked up again: pictures come and go without the model changing)."""
        key = str(listed.path)
        with self._lock:
            before = self._stamps.get(key)
            entry = self._entries.get(key)
        if before is None or entry is None or entry.record is None:
            return None
        same = (before.real, before.size, before.mtime_ns, before.sidecars, before.root, before.folder) == (
            listed.real, listed.size, listed.mtime_ns, listed.sidecars, listed.root, listed.folder
        )  # fmt: skip
        if not same:
            return None
        preview = find_preview(listed.path, listed.siblings)
        return entry if preview == entry.preview else entry.with_record(entry.record, preview)


def _base_entry(listed: Listed) -> Entry:
    return Entry(
        path=listed.path,
        origin=listed.root.origin,
        root=listed.root.path,
        folder=listed.folder,
        kind_hint=listed.root.kind_hint,
        size=listed.size,
        mtime_ns=listed.mtime_ns,
        file_id=listed.file_id,
    )


def _error_entry(entry: Entry, listed: Listed) -> Entry:
    assert listed.error is not None
    code, message = listed.error
    return entry.with_error(message, code)


def _unchanged(listed: Listed) -> bool:
    """The file is still as listed (not rewritten while its header was read)."""
    try:
        st = os.stat(listed.path)
    except OSError:
        return False
    return (st.st_size, st.st_mtime_ns) == (listed.size, listed.mtime_ns)


def _relist(entry: Entry) -> Listed:
    """A fresh listing of one entry's file (for :meth:`LibraryIndex.refresh`)."""
    root = ModelRoot(entry.root, entry.kind_hint, entry.origin)
    walker = Walker([ModelRoot(entry.path, entry.kind_hint, entry.origin)])
    for batch in walker:
        for listed in batch:
            return Listed(
                entry.path, root, entry.folder, listed.real, listed.size, listed.mtime_ns,
                listed.siblings, listed.sidecars, file_id=listed.file_id,
            )  # fmt: skip
    try:
        os.stat(entry.path)
        gone = ("unreadable", f"{entry.name} is no longer a model file that can be listed")
    except FileNotFoundError:
        gone = ("not_found", f"{entry.name} no longer exists (moved or deleted); rescan the library")
    except OSError as exc:
        gone = ("unreadable", f"{entry.name} cannot be read: {exc.strerror or exc}")
    return Listed(entry.path, root, entry.folder, str(entry.path), 0, 0, frozenset(), "", gone)
