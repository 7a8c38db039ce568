"""The queue's dispatch loop, the same for every executor: free workers take jobs (model affinity,
:mod:`core.queue.scheduler`), finished jobs' pictures are written here, by the client, once and
atomically; a lost worker's job is queued again for another; a stop puts running jobs back.

An executor is a :class:`Pool`: the in-process one (:class:`LocalPool`, one :class:`Worker` in
this process) or Ray's (``core.queue.ray_pool``, one actor per worker).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from core.errors import InterruptedByUser, LoadoutError
from core.files.atomic import atomic_write_bytes
from core.generate.events import GenerateProgress
from core.queue.grid_jobs import draw_finished_grid
from core.queue.job import FileRef, Job, Key
from core.queue.scheduler import Picker, pick
from core.queue.store import JobStore, Totals
from core.queue.worker import CellResult, Worker
from core.session.snapshots import SessionEvent


@dataclass(frozen=True)
class Outcome:
    worker: str
    job_id: int
    result: CellResult | None = None
    error: LoadoutError | None = None
    lost: bool = False  # the worker went away (its process died, its node left)
    interrupted: bool = False


class Pool(Protocol):
    def workers(self) -> list[str]: ...
    def held(self, worker: str) -> Key: ...
    def missing(self, worker: str, files: tuple[FileRef, ...]) -> list[FileRef]: ...
    def start(self, worker: str, job_id: int, job: Job) -> None: ...
    def wait(self, timeout: float) -> list[Outcome]: ...
    def progress(self) -> dict[int, GenerateProgress]: ...
    def stop(self, worker: str | None = None) -> None: ...
    def events(self) -> list[tuple[str, SessionEvent]]: ...
    def stats(self) -> dict[str, dict[str, int]]: ...


#: where each phase of a job starts (sampling is most of it; the hires fix's upscale sits between
#: its two sampling passes, each of which reports "sample" from 0 again)
_PHASE_AT = {"load": 0.0, "text_encode": 0.05, "sample": 0.1, "upscale": 0.5, "decode": 0.9, "save": 0.98}


def fraction(p: GenerateProgress) -> float:
    """How far one job is (a phase not listed counts as sampling's start)."""
    within = p.step / p.steps if p.steps else 0.0
    at = _PHASE_AT.get(p.phase, 0.1)
    return at + 0.8 * within if p.phase == "sample" else at


class LocalPool:
    """The in-process executor: one worker (the window's or the command's session) running each job
    in the caller's thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._next: tuple[int, Job] | None = None
        self._progress: dict[int, GenerateProgress] = {}
        self._lock = threading.Lock()
        self.on_progress: Callable[[int, GenerateProgress], None] = lambda job_id, p: None
        self.listener: Callable[[int, GenerateProgress], None] = lambda job_id, p: None  # the runner's

    def workers(self) -> list[str]:
        return [self.worker.name]

    def held(self, worker: str) -> Key:
        return self.worker.held

    def missing(self, worker: str, files: tuple[FileRef, ...]) -> list[FileRef]:
        return self.worker.missing(files)

    def start(self, worker: str, job_id: int, job: Job) -> None:
        self._next = (job_id, job)

    def wait(self, timeout: float) -> list[Outcome]:
        if self._next is None:
            return []
        job_id, job = self._next
        self._next = None

        def progress(p: GenerateProgress) -> None:
            with self._lock:
                self._progress[job_id] = p
            self.listener(job_id, p)
            self.on_progress(job_id, p)

        try:
            return [Outcome(self.worker.name, job_id, self.worker.run(job, progress))]
        except InterruptedByUser:
            return [Outcome(self.worker.name, job_id, interrupted=True)]
        except LoadoutError as exc:
            return [Outcome(self.worker.name, job_id, error=exc)]
        finally:
            with self._lock:
                self._progress.pop(job_id, None)

    def progress(self) -> dict[int, GenerateProgress]:
        with self._lock:
            return dict(self._progress)

    def stop(self, worker: str | None = None) -> None:
        self.worker.stop()

    def events(self) -> list[tuple[str, SessionEvent]]:
        return [(self.worker.name, e) for e in self.worker.drain_events()]

    def stats(self) -> dict[str, dict[str, int]]:
        return {self.worker.name: {"jobs": self.worker.jobs, "model_loads": self.worker.model_loads}}


class ClusterLost(LoadoutError):
    code = "cluster_lost"


@dataclass
class RunReport:
    finished: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    grids: list[str] = field(default_factory=list)
    stopped: bool = False


Update = Callable[[Totals], None]
#: A job whose worker died this many times fails instead of taking the next worker down with it.
MAX_ATTEMPTS = 3
Events = Callable[[list[tuple[str, SessionEvent]]], None]


class QueueRunner:
    """Runs the store's queued jobs on a pool until none is left, the queue is paused, or stop()."""

    def __init__(
        self,
        store: JobStore,
        pool: Pool,
        *,
        picker: Picker = pick,
        on_update: Update | None = None,
        on_events: Events | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.picker = picker
        self.on_update = on_update or (lambda totals: None)
        self.on_events = on_events or (lambda events: None)  # each worker's session events, as they come
        self._stop = threading.Event()
        self._last_update = 0.0
        self._lacks: dict[tuple[str, tuple[FileRef, ...]], bool] = {}

    def stop(self) -> None:
        """From any thread: running jobs stop within a step and go back to the queue."""
        self._stop.set()
        self.pool.stop()

    def cancel(self, job_id: int) -> None:
        """From any thread: a queued job is dropped; a running one stops within a step, unwritten,
        and the others go on."""
        job = self.store.get(job_id)
        if self.store.cancel(job_id) == "running":
            self.pool.stop(job.worker)

    def _can_run(self, worker: str, job: Job) -> bool:
        key = (worker, job.files)
        if key not in self._lacks:
            self._lacks[key] = bool(self.pool.missing(worker, job.files))
        return not self._lacks[key]

    def _dispatch(self, running: dict[str, int]) -> None:
        queued = {j.id: j.job for j in self.store.jobs("queued")}
        for worker in self.pool.workers():
            if worker in running or not queued:
                continue
            pending = [(i, j.key()) for i, j in queued.items()]
            others = {self.pool.held(w) for w in self.pool.workers() if w != worker}

            def can_run(i: int, w: str = worker) -> bool:
                return self._can_run(w, queued[i])

            job_id = self.picker(self.pool.held(worker), pending, others, can_run)
            if job_id is None:
                continue
            job = queued.pop(job_id)
            if not self.store.claim(job_id, worker):  # another program sharing the file took it
                continue
            self.pool.start(worker, job_id, job)
            running[worker] = job_id

    def _nobody_can_run(self) -> None:
        """Fail the queued jobs no worker has the files for (they would wait forever)."""
        workers = self.pool.workers()
        for j in self.store.jobs("queued"):
            if workers and not any(self._can_run(w, j.job) for w in workers):
                missing = self.pool.missing(workers[0], j.job.files) or list(j.job.files)
                self.store.fail(
                    j.id,
                    f"no worker has {missing[0].path.name} (SHA-256 {missing[0].sha256[:12]}...): "
                    "copy it into a worker's model folders and retry",
                )

    def _finish(self, outcome: Outcome, report: RunReport) -> None:
        job = self.store.get(outcome.job_id)
        if job.state != "running":  # cancelled meanwhile: nothing is written
            return
        if outcome.result is not None:
            paths = job.job.outputs()
            try:
                for path, data in zip(paths, outcome.result.pngs, strict=False):
                    atomic_write_bytes(path, data, replace=False)  # never another job's picture
            except LoadoutError as exc:  # a full disk, a folder gone: this job fails, the file is untouched
                self.store.fail(outcome.job_id, exc.message)
                report.failed.append(outcome.job_id)
                return
            self.store.finish(
                outcome.job_id, paths[: len(outcome.result.pngs)], outcome.worker, outcome.result.seconds
            )
            report.finished.append(outcome.job_id)
            grid = draw_finished_grid(self.store, job.job)
            if grid is not None:
                report.grids.append(str(grid))
        elif outcome.interrupted:  # a stop, whoever asked for it: the job waits for the next run
            self._stop.set()
            self.store.requeue(outcome.job_id)
        elif outcome.lost and job.attempts + 1 >= MAX_ATTEMPTS:  # it may be what kills them
            self.store.fail(
                outcome.job_id, f"{MAX_ATTEMPTS} workers were lost running this job; it is not run again"
            )
            report.failed.append(outcome.job_id)
        elif outcome.lost:
            self.store.requeue(outcome.job_id, f"worker {outcome.worker} was lost")
        elif outcome.error is not None:
            if outcome.error.code == "missing_file":
                self._lacks[(outcome.worker, job.job.files)] = True
                self.store.requeue(outcome.job_id, outcome.error.message)
            else:
                self.store.fail(outcome.job_id, outcome.error.message)
                report.failed.append(outcome.job_id)

    def _progressed(self, job_id: int, p: GenerateProgress) -> None:
        """A step of an in-process job (which runs inside pool.wait): its progress and the total."""
        self.store.set_progress(job_id, fraction(p))
        now = time.monotonic()
        if now - self._last_update >= 0.1:
            self._last_update = now
            self.on_update(self.store.totals())

    def _relay_events(self) -> None:
        events = self.pool.events()
        if events:
            self.on_events(events)

    def run(self) -> RunReport:
        if isinstance(self.pool, LocalPool):
            self.pool.listener = self._progressed
        report = RunReport()
        running: dict[str, int] = {}
        self._stop.clear()
        self.store.recover()  # a job an earlier run left "running" (its state could not be written)
        while True:
            if not self._stop.is_set() and not self.store.paused:
                self._nobody_can_run()
                self._dispatch(running)
            if not running:
                break
            if not self.pool.workers():
                break
            for outcome in self.pool.wait(0.2):
                running.pop(outcome.worker, None)
                self._finish(outcome, report)
            for job_id, p in self.pool.progress().items():
                self.store.set_progress(job_id, fraction(p))
            alive = set(self.pool.workers())
            for worker in [w for w in running if w not in alive]:
                self.store.requeue(running.pop(worker), f"worker {worker} was lost")
            self.on_update(self.store.totals())
            self._relay_events()
        self._relay_events()
        report.stopped = self._stop.is_set()
        left = self.store.jobs("queued")
        if left and not self.pool.workers():
            kept = self.store.path != ":memory:"  # a command's queue lives only as long as the command
            raise ClusterLost(
                "the cluster went away",
                why=f"no worker is left; {len(left)} job(s) "
                + ("stay queued in the queue file" if kept else "were not made"),
                fix="Start the cluster again (or choose the in-process executor) and run "
                + ("the queue again" if kept else "the command again"),
            )
        return report
