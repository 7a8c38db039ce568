"""A persistent cache of inspect records, so a file is read once until it changes.

One sqlite file (the app picks its per-user location). A record is keyed by the file's real path
and is valid while the file's size and ``mtime_ns`` (and the signature of its info sidecars) are
unchanged. Writes go through sqlite transactions, so a crash leaves the last committed state.
Beside the records (schema 2): full-file hashes by (real path, size, ``mtime_ns``) and the time
each file was last used, both kept when a new engine version empties the records. A schema-1
file is migrated in place (the new tables are added, its records kept).

The cache is a convenience, never a reason to fail: a corrupt file, a file from another schema
or engine version, or a location that cannot be written is rebuilt (or replaced by an in-memory
cache) with a warning in :attr:`InspectCache.warnings`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Bump when the stored shape changes. Version 1 files (records only) are migrated in place by
#: adding the tables of version 2 (full-file hashes, last-used times); others are rebuilt.
SCHEMA_VERSION = 2
#: Versions opened by adding what is missing (CREATE TABLE IF NOT EXISTS), nothing lost.
MIGRATABLE = (0, 1, SCHEMA_VERSION)
#: Records are committed in batches of this many (and on flush/close).
BATCH = 64
#: Error codes that say nothing lasting about the file (a permission, a race): never cached.
TRANSIENT_CODES = frozenset({"not_found", "unreadable", "not_a_file", "is_directory", "read_failed"})

_CREATE = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS records (path TEXT PRIMARY KEY, size INTEGER NOT NULL, "
    "mtime_ns INTEGER NOT NULL, sidecars TEXT NOT NULL, record TEXT NOT NULL)",
    # v2: hashes do not depend on the engine's detection, so a new engine version keeps them
    "CREATE TABLE IF NOT EXISTS hashes (path TEXT PRIMARY KEY, size INTEGER NOT NULL, "
    "mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL, addnet TEXT)",
    "CREATE TABLE IF NOT EXISTS usage (path TEXT PRIMARY KEY, last_used REAL NOT NULL)",
)


def _is_digest(value: object) -> bool:
    """A SHA-256 as :mod:`core.library.hashes` stores it: 64 lower-case hex digits."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def cacheable(record: Mapping[str, Any]) -> bool:
    """Whether an inspect record says something lasting about the file's contents."""
    error = record.get("error")
    return not (isinstance(error, Mapping) and error.get("code") in TRANSIENT_CODES)


class InspectCache:
    """Inspect records by (real path, size, mtime_ns, sidecar signature).

    ``path`` None keeps the cache in memory (tests, one-off runs). ``engine_version`` is stored
    with the records: a cache written by another version is emptied (detection may have changed).
    Safe to share between threads (one lock); meant to be used by one scanning thread at a time.
    """

    def __init__(self, path: Path | None, *, engine_version: str = "") -> None:
        self.path = Path(path) if path is not None else None
        self.engine_version = engine_version
        self.warnings: list[str] = []
        self._lock = threading.Lock()
        self._pending = 0
        self._closed = False
        self.hash_hits = 0  # hashes answered from the cache (tests count them)
        self._conn = self._open()

    # -- opening and rebuilding ---------------------------------------------------------------

    def _connect(self, target: str) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=5.0, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("BEGIN")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in MIGRATABLE:
                raise _Mismatch(f"it was written with cache schema {version}, this is {SCHEMA_VERSION}")
            for statement in _CREATE:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            row = conn.execute("SELECT value FROM meta WHERE key = 'engine'").fetchone()
            if row is not None and row[0] != self.engine_version:
                conn.execute("DELETE FROM records")
                self.warnings.append(
                    f"the model cache was written by engine version {row[0]!r}, this is "
                    f"{self.engine_version!r}: every file will be read once again"
                )
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('engine', ?)", (self.engine_version,))
            conn.execute("SELECT count(*) FROM records").fetchone()
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        return conn

    def _open(self) -> sqlite3.Connection:
        if self.path is None:
            return self._connect(":memory:")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return self._connect(str(self.path))
        except (OSError, sqlite3.OperationalError) as exc:
            # Cannot be created, or busy in another process: never touch the file.
            return self._in_memory(exc)
        except (sqlite3.DatabaseError, _Mismatch) as exc:
            self.warnings.append(f"the model cache {self.path} was unusable ({exc}); it was rebuilt")
        try:
            self._set_aside()
            return self._connect(str(self.path))
        except (OSError, sqlite3.Error, _Mismatch) as exc:
            return self._in_memory(exc)

    def _set_aside(self) -> None:
        """Move the unusable file to ``<name>.corrupt`` (kept for a bug report, never deleted)."""
        assert self.path is not None
        os.replace(self.path, str(self.path) + ".corrupt")
        journal = Path(str(self.path) + "-journal")
        if journal.exists():
            journal.unlink()

    def _in_memory(self, exc: BaseException) -> sqlite3.Connection:
        self.warnings.append(
            f"the model cache {self.path} cannot be opened ({exc}); results are kept in memory "
            "until the app closes"
        )
        self.path = None
        return self._connect(":memory:")

    def _recover(self, exc: sqlite3.Error) -> None:
        """A query failed. Busy or locked (another process): this write is skipped. Otherwise the
        file was damaged while open: start over with an empty cache."""
        if isinstance(exc, sqlite3.OperationalError):
            message = f"the model cache is busy ({exc}); some results were not saved"
            if message not in self.warnings:
                self.warnings.append(message)
            with contextlib.suppress(sqlite3.Error):
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            self._pending = 0
            return
        self.warnings.append(f"the model cache failed ({exc}); it was rebuilt")
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        self._pending = 0
        self._conn = self._open()

    # -- records ------------------------------------------------------------------------------

    def get(self, real_path: str, size: int, mtime_ns: int, sidecars: str = "") -> dict[str, Any] | None:
        """The record stored for this file in this state, or None."""
        with self._lock:
            if self._closed:
                return None
            try:
                row = self._conn.execute(
                    "SELECT size, mtime_ns, sidecars, record FROM records WHERE path = ?", (real_path,)
                ).fetchone()
            except sqlite3.Error as exc:
                self._recover(exc)
                return None
        if row is None or (row[0], row[1], row[2]) != (size, mtime_ns, sidecars):
            return None
        try:
            record = json.loads(row[3])
        except (ValueError, RecursionError):
            return None
        return record if isinstance(record, dict) else None

    def put(self, real_path: str, size: int, mtime_ns: int, sidecars: str, record: Mapping[str, Any]) -> None:
        """Store ``record`` (committed with the next batch, :meth:`flush` or :meth:`close`)."""
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        with self._lock:
            if self._closed:
                return
            try:
                if not self._conn.in_transaction:
                    self._conn.execute("BEGIN")
                self._conn.execute(
                    "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?)",
                    (real_path, size, mtime_ns, sidecars, text),
                )
                self._pending += 1
                if self._pending >= BATCH:
                    self._commit()
            except sqlite3.Error as exc:
                self._recover(exc)

    def _commit(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")
        self._pending = 0

    def flush(self) -> None:
        """Commit what :meth:`put` stored."""
        with self._lock:
            if self._closed:
                return
            try:
                self._commit()
            except sqlite3.Error as exc:
                self._recover(exc)

    # -- full-file hashes and last-used times (kept across engine versions) --------------------

    def get_hash(self, real_path: str, size: int, mtime_ns: int) -> tuple[str, str | None] | None:
        """``(sha256, addnet)`` stored for this file in this state, or None. Counts :attr:`hash_hits`.

        A damaged row (a hash that is not 64 hex digits, an addnet hash that is neither that nor
        empty) is dropped and answers None, so the file is read again: a bogus value must not make
        two files look like copies of each other."""
        row = self._fetch("SELECT size, mtime_ns, sha256, addnet FROM hashes WHERE path = ?", real_path)
        if row is None or (row[0], row[1]) != (size, mtime_ns):
            return None
        if not _is_digest(row[2]) or not (row[3] is None or _is_digest(row[3])):
            self._write("DELETE FROM hashes WHERE path = ?", (real_path,))
            return None
        self.hash_hits += 1
        return row[2], row[3]

    def put_hash(self, real_path: str, size: int, mtime_ns: int, sha256: str, addnet: str | None) -> None:
        """Store a file's hashes, committed at once (each took a full read of the file)."""
        values = (real_path, size, mtime_ns, sha256, addnet)
        self._write("INSERT OR REPLACE INTO hashes VALUES (?, ?, ?, ?, ?)", values)

    def last_used(self, real_path: str) -> float | None:
        """When the file was last loaded or used for a picture (seconds since the epoch), or None."""
        row = self._fetch("SELECT last_used FROM usage WHERE path = ?", real_path)
        return float(row[0]) if row is not None and isinstance(row[0], (int, float)) else None

    def note_used(self, real_path: str, when: float) -> None:
        self._write("INSERT OR REPLACE INTO usage VALUES (?, ?)", (real_path, when))

    def _fetch(self, query: str, key: str) -> tuple[Any, ...] | None:
        with self._lock:
            if self._closed:
                return None
            try:
                row = self._conn.execute(query, (key,)).fetchone()
            except sqlite3.Error as exc:
                self._recover(exc)
                return None
        return tuple(row) if row is not None else None

    def _write(self, statement: str, values: tuple[Any, ...]) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                if not self._conn.in_transaction:
                    self._conn.execute("BEGIN")
                self._conn.execute(statement, values)
                self._commit()
            except sqlite3.Error as exc:
                self._recover(exc)

    def forget_missing(self) -> int:
        """Drop records (and hashes, last-used times) of files that no longer exist; returns how
        many records."""
        with self._lock:
            if self._closed:
                return 0
            try:
                self._commit()
                paths = [r[0] for r in self._conn.execute("SELECT path FROM records")]
                gone = [(p,) for p in paths if not os.path.exists(p)]
                others = {
                    r[0] for t in ("hashes", "usage") for r in self._conn.execute(f"SELECT path FROM {t}")
                }
                gone_others = [(p,) for p in others if not os.path.exists(p)]
                self._conn.execute("BEGIN")
                self._conn.executemany("DELETE FROM records WHERE path = ?", gone)
                self._conn.executemany("DELETE FROM hashes WHERE path = ?", gone_others)
                self._conn.executemany("DELETE FROM usage WHERE path = ?", gone_others)
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._recover(exc)
                return 0
        return len(gone)

    def __len__(self) -> int:
        with self._lock:
            if self._closed:
                return 0
            try:
                return int(self._conn.execute("SELECT count(*) FROM records").fetchone()[0])
            except sqlite3.Error as exc:
                self._recover(exc)
                return 0

    def close(self) -> None:
        """Commit and close. A closed cache answers nothing and stores nothing (a scan still
        running when the app shuts down just reads its files)."""
        self.flush()
        with self._lock:
            self._closed = True
            self._conn.close()

    def __enter__(self) -> InspectCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Mismatch(Exception):
    """The file is a sqlite database, but not one this version can use."""
