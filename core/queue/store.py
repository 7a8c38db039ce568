"""The queue file: jobs in sqlite, so quitting or a crash loses none.

Every change is one committed statement (WAL journal), so the file always holds a consistent
queue. Per-job progress lives in memory only (it changes many times a second); the states, order,
attempts, errors and results are in the file.

- **One owner.** The first store to open a file takes an exclusive lock on ``FILE.lock`` (held as
  long as it is open) and is its owner: only the owner recovers a job left "running" by a program
  that ended (queued again, or done when all its pictures are on disk). A second store on the same
  file (another window) shares it: it says so (:attr:`JobStore.owner_pid`), never recovers, and
  takes a job only by :meth:`JobStore.claim`, which moves it from queued to running in one
  statement, so no job runs twice.
- **Bad rows quarantined.** A row that cannot be read as a job (bad JSON, an unknown state, a value
  the request refuses) is moved by the owner to the ``quarantine`` table and named in
  :attr:`JobStore.quarantined`; the rest of the queue is usable.
- **Store errors are messages.** A lock held elsewhere is waited for and retried; what still fails
  (a full disk, a read-only folder, a damaged file) is a :class:`QueueFileError` saying what to do,
  never a raw ``sqlite3`` error.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.errors import LoadoutError
from core.queue.job import Job
from core.queue.queue_file import Owner, QueueFileError, store_error

State = Literal["queued", "running", "done", "failed", "cancelled"]
STATES = ("queued", "running", "done", "failed", "cancelled")
#: How long a store waits for a lock another program holds on the queue file, in seconds.
BUSY_SECONDS = 5.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    position REAL NOT NULL,
    state TEXT NOT NULL,
    job TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    worker TEXT NOT NULL DEFAULT '',
    seconds REAL NOT NULL DEFAULT 0,
    images TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (id INTEGER PRIMARY KEY, state TEXT, job TEXT, reason TEXT NOT NULL);
"""


@dataclass(frozen=True)
class QueuedJob:
    id: int
    job: Job
    state: State
    attempts: int = 0
    error: str = ""
    worker: str = ""
    seconds: float = 0.0
    images: tuple[Path, ...] = ()
    progress: float = 0.0  # 0..1 of this job (done: 1)


@dataclass(frozen=True)
class Totals:
    done: int
    total: int  # jobs not cancelled
    fraction: float  # done jobs plus the running ones' progress, over total


class JobStore:
    """A queue file (``":memory:"`` for a queue that lives as long as the command)."""

    def __init__(self, path: Path | str = ":memory:", *, busy_seconds: float = BUSY_SECONDS) -> None:
        self.path = path
        self.busy_seconds = busy_seconds
        self._lock = threading.RLock()
        self._progress: dict[int, float] = {}
        self._owner: Owner | None = None
        self.quarantined: list[str] = []  # "job N: why", each row moved out of the queue
        self._seen_bad: set[int] = set()
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                self._owner = Owner(Path(path))
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=0.1)
            self._retrying(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
            self._retrying(lambda: self._db.executescript(_SCHEMA))
        except (sqlite3.Error, OSError, QueueFileError) as exc:
            self._release()
            why = exc.why if isinstance(exc, QueueFileError) else str(exc)
            raise QueueFileError(
                f"cannot open the queue file {path}",
                why=why,
                fix="Check that the data folder is writable; move a damaged queue file away to start afresh",
            ) from None
        self._quarantine()
        self.recovered = self.recover() if self.owner else 0

    @property
    def owner(self) -> bool:
        """Whether this store owns its file (see the module notes); False while another program does."""
        return self._owner is None or self._owner.owner

    @property
    def owner_pid(self) -> int:
        """The process id of the program that owns the file when it is not this one (-1: unknown)."""
        return 0 if self._owner is None else self._owner.other_pid

    def _release(self) -> None:
        if self._owner is not None:
            self._owner.close()

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._release()

    def _retrying(self, call: Callable[[], sqlite3.Cursor]) -> sqlite3.Cursor:
        """``call`` retried while another program holds a lock (up to ``busy_seconds``); any error
        then is a :class:`QueueFileError`."""
        deadline = time.monotonic() + self.busy_seconds
        delay = 0.02
        while True:
            try:
                return call()
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise store_error(self.path, exc) from None
                time.sleep(delay)
                delay = min(0.25, delay * 2)
            except (sqlite3.Error, OSError) as exc:
                raise store_error(self.path, exc) from None

    def _exec(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._retrying(lambda: self._db.execute(sql, args))

    def _transaction(self, statements: list[tuple[str, tuple[object, ...]]]) -> list[sqlite3.Cursor]:
        """The statements as one transaction: all of them or none."""

        def run() -> list[sqlite3.Cursor]:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                out = [self._db.execute(sql, args) for sql, args in statements]
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            return out

        with self._lock:
            result: list[sqlite3.Cursor] = []

            def attempt() -> sqlite3.Cursor:
                result[:] = run()
                return result[0] if result else self._db.cursor()

            self._retrying(attempt)
            return result

    def _quarantine(self) -> None:
        """Move the rows that cannot be read as jobs out of the queue (owner), naming each."""
        rows = self._exec(f"SELECT {self._COLUMNS} FROM jobs ORDER BY position, id").fetchall()
        for row in rows:
            reason = self._bad(row)
            if reason is None:
                continue
            self._note_bad(int(row[0]), reason)
            if self.owner:
                self._transaction([
                    ("INSERT OR REPLACE INTO quarantine (id, state, job, reason) "
                     "SELECT id, state, job, ? FROM jobs WHERE id=?", (reason, row[0])),
                    ("DELETE FROM jobs WHERE id=?", (row[0],)),
                ])  # fmt: skip

    def _note_bad(self, job_id: int, reason: str) -> None:
        if job_id not in self._seen_bad:
            self._seen_bad.add(job_id)
            self.quarantined.append(f"job {job_id}: {reason}")

    def recover(self) -> int:
        """Jobs left "running" by a program that ended: done when all their pictures are on disk
        (the client writes them last), else queued again. Only the owner may (another program's
        running job is running). Returns how many were queued again."""
        if not self.owner:
            return 0
        queued = 0
        for q in self.jobs("running"):
            outputs = q.job.outputs()
            if outputs and all(p.is_file() for p in outputs):
                self._exec(
                    "UPDATE jobs SET state='done', images=? WHERE id=? AND state='running'",
                    (json.dumps([str(p) for p in outputs]), q.id),
                )
            else:
                queued += self._exec(
                    "UPDATE jobs SET state='queued' WHERE id=? AND state='running'", (q.id,)
                ).rowcount
        return queued

    # -- reading ----------------------------------------------------------------------------------
    def _decode(self, row: tuple[object, ...]) -> QueuedJob:
        id_, state, job, attempts, error, worker, seconds, images = row
        if not isinstance(id_, int) or not isinstance(job, str) or not isinstance(images, str):
            raise ValueError("a column holds the wrong type")
        if state not in STATES:
            raise ValueError(f"unknown state {state!r}")
        data = json.loads(job)
        if not isinstance(data, dict):
            raise ValueError("the job is not a JSON object")
        paths = json.loads(images)
        if not isinstance(paths, list):
            raise ValueError("the pictures are not a JSON list")
        progress = 1.0 if state == "done" else self._progress.get(id_, 0.0)
        return QueuedJob(
            id_, Job.from_json(data), state, int(str(attempts)), str(error), str(worker),  # type: ignore[arg-type]
            float(str(seconds)), tuple(Path(str(p)) for p in paths), progress,
        )  # fmt: skip

    def _bad(self, row: tuple[object, ...]) -> str | None:
        """Why ``row`` is not a readable job (None: it is)."""
        try:
            self._decode(row)
        except LoadoutError as exc:
            return exc.message
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _row(self, row: tuple[object, ...]) -> QueuedJob | None:
        """The job of ``row``, or None for a damaged row (named in :attr:`quarantined`)."""
        reason = self._bad(row)
        if reason is not None:
            self._note_bad(int(str(row[0])), reason)
            return None
        return self._decode(row)

    _COLUMNS = "id, state, job, attempts, error, worker, seconds, images"

    def jobs(self, state: State | None = None) -> list[QueuedJob]:
        """Jobs in queue order (of one state when given); damaged rows are left out (and named)."""
        if state is None:
            rows = self._exec(f"SELECT {self._COLUMNS} FROM jobs ORDER BY position, id").fetchall()
        else:
            rows = self._exec(
                f"SELECT {self._COLUMNS} FROM jobs WHERE state=? ORDER BY position, id", (state,)
            ).fetchall()
        return [q for q in (self._row(r) for r in rows) if q is not None]

    def get(self, job_id: int) -> QueuedJob:
        row = self._exec(f"SELECT {self._COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        found = self._row(row) if row is not None else None
        if found is None:
            raise LoadoutError(
                f"there is no job {job_id} in the queue", fix="Pick a job the queue lists", code="no_job"
            )
        return found

    def totals(self) -> Totals:
        jobs = [j for j in self.jobs() if j.state != "cancelled"]
        done = sum(j.state in ("done", "failed") for j in jobs)
        running = sum(j.progress for j in jobs if j.state == "running")
        return Totals(done, len(jobs), (done + running) / len(jobs) if jobs else 1.0)

    @property
    def paused(self) -> bool:
        row = self._exec("SELECT value FROM meta WHERE key='paused'").fetchone()
        return bool(row and row[0] == "1")

    # -- changing ---------------------------------------------------------------------------------
    def add(self, jobs: list[Job]) -> list[int]:
        top = "(SELECT COALESCE(MAX(position), 0) + 1 FROM jobs)"
        insert = f"INSERT INTO jobs (position, state, job) VALUES ({top}, 'queued', ?)"
        cursors = self._transaction([(insert, (json.dumps(j.to_json()),)) for j in jobs])
        return [int(c.lastrowid or 0) for c in cursors]

    def _set(self, job_id: int, sql: str, args: tuple[object, ...] = ()) -> None:
        self._exec(f"UPDATE jobs SET {sql} WHERE id=?", (*args, job_id))

    def claim(self, job_id: int, worker: str) -> bool:
        """Move a queued job to running for ``worker`` in one statement; False when another program
        sharing the file took it (or it was cancelled) first."""
        taken = self._exec(
            "UPDATE jobs SET state='running', worker=? WHERE id=? AND state='queued'", (worker, job_id)
        ).rowcount
        if taken:
            self._progress[job_id] = 0.0
        return bool(taken)

    def start(self, job_id: int, worker: str) -> None:
        self._progress[job_id] = 0.0
        self._set(job_id, "state='running', worker=?", (worker,))

    def set_progress(self, job_id: int, fraction: float) -> None:
        self._progress[job_id] = min(1.0, max(0.0, fraction))

    def finish(self, job_id: int, images: list[Path], worker: str, seconds: float) -> None:
        self._progress.pop(job_id, None)
        self._set(
            job_id, "state='done', images=?, worker=?, seconds=?, error=''",
            (json.dumps([str(p) for p in images]), worker, seconds),
        )  # fmt: skip

    def fail(self, job_id: int, error: str) -> None:
        self._progress.pop(job_id, None)
        self._set(job_id, "state='failed', error=?", (error,))

    def requeue(self, job_id: int, reason: str = "") -> None:
        """Back to queued (a worker was lost or stopped): it keeps its place and counts the attempt."""
        self._progress.pop(job_id, None)
        self._set(job_id, "state='queued', attempts=attempts+1, error=?", (reason,))

    def cancel(self, job_id: int) -> State:
        """Cancel a queued or running job (the caller stops a running one); returns its old state."""
        old = self.get(job_id).state
        if old in ("queued", "running"):
            self._progress.pop(job_id, None)
            self._set(job_id, "state='cancelled'")
        return old

    def retry(self, job_id: int) -> None:
        """A failed or cancelled job queued again, at the end."""
        if self.get(job_id).state in ("failed", "cancelled"):
            top = self._exec("SELECT COALESCE(MAX(position), 0) FROM jobs").fetchone()[0]
            self._set(job_id, "state='queued', error='', position=?", (top + 1,))

    def move(self, job_id: int, index: int) -> None:
        """Put a job at ``index`` in the queue order (0: first)."""
        with self._lock:
            order = [j.id for j in self.jobs() if j.id != job_id]
            self.get(job_id)
            order.insert(max(0, min(index, len(order))), job_id)
            self._transaction(
                [("UPDATE jobs SET position=? WHERE id=?", (pos + 1, jid)) for pos, jid in enumerate(order)]
            )

    def set_paused(self, paused: bool) -> None:
        self._exec(
            "INSERT INTO meta (key, value) VALUES ('paused', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            ("1" if paused else "0",),
        )

    def clear_finished(self) -> None:
        self._exec("DELETE FROM jobs WHERE state IN ('done', 'cancelled')")
