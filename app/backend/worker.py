"""A generic task runner: a QObject living in its own QThread that runs submitted jobs one at a
time and relays what they report as signals (superqt's worker style, without the dependency).

It knows nothing of models: a :class:`Job` is a task name and a callable taking a
:class:`Reporter`, through which the job sends typed progress (throttled) and results (any frozen
snapshot; the :class:`~app.backend.backend.Backend` routes them by type). Exceptions become a
``failed`` :class:`TaskError`, a stop becomes ``interrupted``. Every framed job emits
``started(task)`` first and ``finished(task)`` last, in that order. Stopping is a
``threading.Event`` the GUI sets directly (a queued call would only run after the busy job ends);
core's checks read it between tensors, files, layers and steps. The flag is cleared when a framed
job *starts*: a Stop ends the job it was pressed for (or is dropped if that job was already done),
never the next one, and one pressed while a job runs is never lost at its end.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.backend.messages import EngineEvent, Task, TaskError, TaskProgress
from core.errors import InterruptedByUser, LoadoutError
from core.loading.assign import interrupt_check

log = logging.getLogger(__name__)

#: Progress is relayed at most this often (seconds): the GUI needs ~20 Hz.
RELAY_INTERVAL = 0.05


#: what a stop left, per task (the event list's words)
STOPPED = {
    "generate": "Stopped as you asked: no picture was saved from this run; the loaded model and its "
    "LoRAs are as they were.",
    "queue": "Stopped as you asked: the running job goes back to the queue; Run continues it.",
    "run": "Stopped as you asked: the test run was cut short; the model is still loaded.",
    "scan": "Stopped as you asked: the folders were read in part; Rescan (F5) reads them again.",
    "lora": "Stopped as you asked: the LoRA stack is as it was before the change.",
    "strength": "Stopped as you asked: the LoRA strength is as it was before the change.",
}


class Reporter:
    """What a running job is handed: ``progress`` (throttled), ``post`` (a result) and ``check``
    (raises ``InterruptedByUser`` once stop was pressed)."""

    def __init__(self, runner: TaskRunner, interval: float = RELAY_INTERVAL) -> None:
        self._runner = runner
        self._interval = interval
        self._last = 0.0
        self.check = runner.check

    def progress(self, p: TaskProgress) -> None:
        now = time.monotonic()
        if now - self._last >= self._interval or (p.total > 0 and p.done >= p.total):
            self._last = now
            self._runner.progress.emit(p)

    def post(self, result: object) -> None:
        self._runner.result.emit(result)


@dataclass(frozen=True)
class Job:
    task: Task
    work: Callable[[Reporter], None]
    path: Path | None = None  # the file it is about (shown with an error)
    framed: bool = True  # False: no started/finished (an instant job, e.g. a slider preview)


class TaskRunner(QObject):
    started = Signal(str)
    progress = Signal(object)  # TaskProgress
    result = Signal(object)  # any snapshot a job posts
    failed = Signal(object)  # TaskError
    interrupted = Signal(str)
    finished = Signal(str)

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self._stop = stop
        self.check = interrupt_check(stop.is_set)

    def post(self, result: object) -> None:
        """Relay ``result`` from any thread (used for events that happen outside a job's call)."""
        self.result.emit(result)

    @Slot(object)
    def run(self, job: Job) -> None:
        if not job.framed:
            try:
                job.work(Reporter(self))
            except Exception as exc:
                self.failed.emit(TaskError(job.task, getattr(exc, "code", "internal"), str(exc)))
            return
        self._stop.clear()  # a Stop pressed before this job began was for the one before
        self.started.emit(job.task)
        try:
            job.work(Reporter(self))
        except InterruptedByUser as exc:
            self.interrupted.emit(job.task)
            # the check's own words are about loading ("load the model again"): only a load says them
            reason = exc.message if job.task == "load" else STOPPED.get(job.task, "Stopped as you asked.")
            self.result.emit(EngineEvent(time.monotonic(), "interrupt", f"stopped {job.task}", reason))
        except LoadoutError as exc:
            self.failed.emit(TaskError(job.task, exc.code, exc.message, path=job.path))
        except MemoryError as exc:
            self.failed.emit(TaskError(job.task, "out_of_memory", str(exc) or "out of memory", path=job.path))
        except OSError as exc:
            self.failed.emit(TaskError(job.task, "os_error", f"{exc.strerror or exc}", path=job.path))
        except Exception as exc:  # a bug must not take the window down: shown as an internal error
            log.exception("backend task %s failed", job.task)
            code = "out_of_memory" if "out of memory" in str(exc).lower() else "internal"
            err = TaskError(job.task, code, f"{type(exc).__name__}: {exc}", internal=True, path=job.path)
            self.failed.emit(err)
        finally:
            self.finished.emit(job.task)
