"""The queue file: jobs in sqlite, so quitting or a crash loses none.

Every change is one committed statement (WAL journal), so the file always holds a consistent
queue. A job that was running when the program ended is queued again when the file is opened
(its picture was never written: the client writes a picture only when the whole job is done).
Per-job progress lives in memory only (it changes many times a second); the states, order,
attempts, errors and results are in the file.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.errors import FileAccessError, LoadoutError
from core.queue.job import Job

State = Literal["queued", "running", "done", "failed", "cancelled"]

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

    def __init__(self, path: Path | str = ":memory:") -> None:
        self.path = path
        try:
            if path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise FileAccessError(
                f"cannot open the queue file {path}",
                why=str(exc),
                fix="Check that the data folder is writable; move a damaged queue file away to start afresh",
                code="queue_file",
            ) from None
        self._lock = threading.RLock()
        self._progress: dict[int, float] = {}
        self.recovered = self._recover()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _recover(self) -> int:
        with self._lock:
            return self._db.execute("UPDATE jobs SET state='queued' WHERE state='running'").rowcount

    # -- reading ----------------------------------------------------------------------------------
    def _row(self, row: tuple[object, ...]) -> QueuedJob:
        id_, state, job, attempts, error, worker, seconds, images = row
        assert isinstance(id_, int) and isinstance(job, str) and isinstance(images, str)
        progress = 1.0 if state == "done" else self._progress.get(id_, 0.0)
        return QueuedJob(
            id_, Job.from_json(json.loads(job)), state, int(str(attempts)), str(error), str(worker),  # type: ignore[arg-type]
            float(str(seconds)), tuple(Path(p) for p in json.loads(images)), progress,
        )  # fmt: skip

    _COLUMNS = "id, state, job, attempts, error, worker, seconds, images"

    def jobs(self, state: State | None = None) -> list[QueuedJob]:
        """Jobs in queue order (of one state when given)."""
        with self._lock:
            if state is None:
                rows = self._db.execute(f"SELECT {self._COLUMNS} FROM jobs ORDER BY position, id").fetchall()
            else:
                rows = self._db.execute(
                    f"SELECT {self._COLUMNS} FROM jobs WHERE state=? ORDER BY position, id", (state,)
                ).fetchall()
            return [self._row(r) for r in rows]

    def get(self, job_id: int) -> QueuedJob:
        with self._lock:
            row = self._db.execute(f"SELECT {self._COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise LoadoutError(
                f"there is no job {job_id} in the queue", fix="Pick a job the queue lists", code="no_job"
            )
        return self._row(row)

    def totals(self) -> Totals:
        jobs = [j for j in self.jobs() if j.state != "cancelled"]
        done = sum(j.state in ("done", "failed") for j in jobs)
        running = sum(j.progress for j in jobs if j.state == "running")
        return Totals(done, len(jobs), (done + running) / len(jobs) if jobs else 1.0)

    @property
    def paused(self) -> bool:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key='paused'").fetchone()
        return bool(row and row[0] == "1")

    # -- changing ---------------------------------------------------------------------------------
    def add(self, jobs: list[Job]) -> list[int]:
        with self._lock:
            top = self._db.execute("SELECT COALESCE(MAX(position), 0) FROM jobs").fetchone()[0]
            ids = []
            self._db.execute("BEGIN")
            for i, job in enumerate(jobs):
                cur = self._db.execute(
                    "INSERT INTO jobs (position, state, job) VALUES (?, 'queued', ?)",
                    (top + 1 + i, json.dumps(job.to_json())),
                )
                assert cur.lastrowid is not None
                ids.append(cur.lastrowid)
            self._db.execute("COMMIT")
            return ids

    def _set(self, job_id: int, sql: str, args: tuple[object, ...] = ()) -> None:
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {sql} WHERE id=?", (*args, job_id))

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
            with self._lock:
                top = self._db.execute("SELECT COALESCE(MAX(position), 0) FROM jobs").fetchone()[0]
            self._set(job_id, "state='queued', error='', position=?", (top + 1,))

    def move(self, job_id: int, index: int) -> None:
        """Put a job at ``index`` in the queue order (0: first)."""
        with self._lock:
            order = [j.id for j in self.jobs() if j.id != job_id]
            self.get(job_id)
            order.insert(max(0, min(index, len(order))), job_id)
            self._db.execute("BEGIN")
            for pos, jid in enumerate(order):
                self._db.execute("UPDATE jobs SET position=? WHERE id=?", (pos + 1, jid))
            self._db.execute("COMMIT")

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('paused', ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                ("1" if paused else "0",),
            )

    def clear_finished(self) -> None:
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE state IN ('done', 'cancelled')")
