"""The backend worker: a QObject living in its own QThread that owns the :class:`Engine`.

It only relays: each slot runs one engine call, turning core's typed progress records into
``progress`` signals (throttled), results into snapshot signals and exceptions into ``failed``.
It never touches a widget. Stopping is a ``threading.Event`` the GUI sets directly (a queued slot
would only run after the busy task ends); core's ``check`` reads it between tensors, files and
steps. Every task emits ``started(task)`` first and ``finished(task)`` last, in that order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.backend.engine import Engine
from app.backend.messages import EngineEvent, Task, TaskError, TaskProgress
from app.backend.placement import PlacementConfig
from app.demo import ensure_demo_library
from core.errors import InterruptedByUser, LoadoutError
from core.library import Entry, ScanProgress
from core.loading.assign import LoadProgress, interrupt_check
from core.run.testrun import RunConfig, StepDone

log = logging.getLogger(__name__)

#: Progress and scan batches are relayed at most this often (seconds): the GUI needs ~20 Hz.
RELAY_INTERVAL = 0.05
SCAN_BATCH_INTERVAL = 0.1


class _Throttle:
    def __init__(self, emit: Callable[[TaskProgress], None], interval: float = RELAY_INTERVAL) -> None:
        self.emit = emit
        self.interval = interval
        self.last = 0.0

    def __call__(self, p: TaskProgress) -> None:
        now = time.monotonic()
        if now - self.last >= self.interval or (p.total > 0 and p.done >= p.total):
            self.last = now
            self.emit(p)


def _scan_progress(p: ScanProgress) -> TaskProgress:
    if p.phase == "listing":
        return TaskProgress("scan", p.done, 0, f"Listing folders: {p.done} files found")
    if p.phase == "inspecting":
        name = f" ({p.current.name})" if p.current is not None else ""
        return TaskProgress("scan", p.done, p.total, f"Reading headers {p.done}/{p.total}{name}")
    return TaskProgress("scan", p.total, p.total, f"Library indexed ({p.cached} from cache)")


def _load_progress(p: LoadProgress) -> TaskProgress:
    mib = p.bytes_done / 2**20
    text = f"Loading {p.component}: {p.tensors_done}/{p.tensors_total} tensors, {mib:.1f} MiB"
    return TaskProgress("load", p.bytes_done, p.bytes_total, text)


class Worker(QObject):
    started = Signal(str)
    progress = Signal(object)  # TaskProgress
    entries_found = Signal(list)  # list[Entry], listed or filled in
    scan_done = Signal(list)  # list[str]: folders skipped and why
    model_loaded = Signal(object)  # ModelInfo
    models_changed = Signal(tuple)  # tuple[ModelInfo, ...]
    stack_changed = Signal(object)  # StackInfo
    run_done = Signal(object)  # RunReport
    failed = Signal(object)  # TaskError
    interrupted = Signal(str)
    event = Signal(object)  # EngineEvent
    demo_ready = Signal(str)  # the demo library's folder
    placement_changed = Signal(object)  # PlacementInfo
    finished = Signal(str)

    def __init__(self, engine: Engine, stop: threading.Event) -> None:
        super().__init__()
        self.engine = engine
        self.engine.emit = self.event.emit
        self.engine.placement.manager.interrupt = stop  # the mover checks it between layers
        self._stop = stop
        self._check = interrupt_check(stop.is_set)
        self._strengths: dict[str, tuple[float, float]] = {}
        self._strengths_lock = threading.Lock()

    # -- the task frame -------------------------------------------------------------------------
    def _run(self, task: Task, work: Callable[[], None], path: Path | None = None) -> None:
        self.started.emit(task)
        try:
            work()
        except InterruptedByUser as exc:
            self.interrupted.emit(task)
            self.event.emit(EngineEvent(time.monotonic(), "interrupt", f"stopped {task}", exc.message))
        except LoadoutError as exc:
            self.failed.emit(TaskError(task, exc.code, exc.message, path=path))
        except MemoryError as exc:
            self.failed.emit(TaskError(task, "out_of_memory", str(exc) or "out of memory", path=path))
        except OSError as exc:
            self.failed.emit(TaskError(task, "os_error", f"{exc.strerror or exc}", path=path))
        except Exception as exc:  # a bug must not take the window down: shown as an internal error
            log.exception("backend task %s failed", task)
            code = "out_of_memory" if "out of memory" in str(exc).lower() else "internal"
            self.failed.emit(TaskError(task, code, f"{type(exc).__name__}: {exc}", internal=True, path=path))
        finally:
            self._stop.clear()  # a stop ends the task it was pressed for, not the next one
            self.finished.emit(task)

    # -- slots (queued from the GUI thread) ------------------------------------------------------
    @Slot(object)
    def scan(self, folders: list[str]) -> None:
        def work() -> None:
            relay = _Throttle(self.progress.emit)
            batch: list[Entry] = []
            last = time.monotonic()
            try:
                for entry in self.engine.scan(folders, lambda p: relay(_scan_progress(p)), self._check):
                    batch.append(entry)
                    if time.monotonic() - last >= SCAN_BATCH_INTERVAL:
                        self.entries_found.emit(batch)
                        batch, last = [], time.monotonic()
            finally:
                if batch:
                    self.entries_found.emit(batch)
            self.scan_done.emit(list(self.engine.problems))

        self._run("scan", work)

    @Slot(str, str)
    def load(self, path: str, kind: str) -> None:
        def work() -> None:
            relay = _Throttle(self.progress.emit)
            info = self.engine.load(Path(path), kind, lambda p: relay(_load_progress(p)), self._check)
            self.model_loaded.emit(info)
            self.models_changed.emit(self.engine.models())
            self.stack_changed.emit(self.engine.stack_info())

        self._run("load", work, Path(path))

    @Slot(str)
    def unload(self, key: str) -> None:
        def work() -> None:
            self.engine.unload(key)
            self.models_changed.emit(self.engine.models())
            self.stack_changed.emit(self.engine.stack_info())

        self._run("unload", work)

    @Slot(str, float, float, bool)
    def add_lora(self, path: str, model: float, clip: float, force: bool) -> None:
        def work() -> None:
            self.stack_changed.emit(self.engine.add_lora(Path(path), model, clip, force))
            self.models_changed.emit(self.engine.models())

        self._run("lora", work, Path(path))

    @Slot(str, float, float)
    def bake_strength(self, lora_id: str, model: float, clip: float) -> None:
        with self._strengths_lock:
            self._strengths.pop(lora_id, None)  # a bake supersedes a pending preview

        def work() -> None:
            self.stack_changed.emit(self.engine.set_strength(lora_id, model, clip, True))

        self._run("strength", work)

    def post_preview(self, lora_id: str, model: float, clip: float) -> bool:
        """Called from the GUI thread: remember the latest strengths; True when no preview is
        queued yet (the caller then queues :meth:`preview_strengths`)."""
        with self._strengths_lock:
            first = not self._strengths
            self._strengths[lora_id] = (model, clip)
            return first

    @Slot()
    def preview_strengths(self) -> None:
        """Show the latest slider values at once (no bake). Coalesced: however many slider moves
        arrived meanwhile, only the newest values are applied. No started/finished: it is instant."""
        with self._strengths_lock:
            pending, self._strengths = self._strengths, {}
        try:
            info = None
            for lora_id, (model, clip) in pending.items():
                info = self.engine.set_strength(lora_id, model, clip, False)
            if info is not None:
                self.stack_changed.emit(info)
        except Exception as exc:
            self.failed.emit(TaskError("strength", getattr(exc, "code", "internal"), str(exc)))

    @Slot(str, bool)
    def set_enabled(self, lora_id: str, enabled: bool) -> None:
        self._run("lora", lambda: self.stack_changed.emit(self.engine.set_enabled(lora_id, enabled)))

    @Slot(str)
    def remove_lora(self, lora_id: str) -> None:
        def work() -> None:
            self.stack_changed.emit(self.engine.remove_lora(lora_id))
            self.models_changed.emit(self.engine.models())

        self._run("lora", work)

    @Slot(list)
    def reorder(self, order: list[str]) -> None:
        self._run("lora", lambda: self.stack_changed.emit(self.engine.reorder(order)))

    @Slot(object)
    def test_run(self, config: RunConfig) -> None:
        def work() -> None:
            relay = _Throttle(self.progress.emit)

            def step(s: StepDone) -> None:
                relay(TaskProgress("run", s.step, s.steps, f"Step {s.step}/{s.steps}: {s.seconds:.3f} s"))

            try:
                self.run_done.emit(self.engine.test_run(config, step, self._check))
            finally:  # the run placed the model: show where it is now
                if self.engine.placement.active:
                    self._placement_snapshots()

        self._run("run", work)

    @Slot(str, str)
    def place(self, key: str, role: str) -> None:
        def work() -> None:
            try:
                self.engine.place(key, role or None)
            finally:  # a refused or stopped placement still shows where everything is
                self._placement_snapshots()

        self._run("memory", work)

    def _placement_snapshots(self) -> None:
        self.models_changed.emit(self.engine.models())
        self.stack_changed.emit(self.engine.stack_info())

    @Slot(str, str)
    def offload(self, key: str, role: str) -> None:
        def work() -> None:
            try:
                self.engine.offload(key, role or None)
            finally:
                self._placement_snapshots()

        self._run("memory", work)

    @Slot(object)
    def configure_memory(self, config: PlacementConfig) -> None:
        def work() -> None:
            self.placement_changed.emit(self.engine.configure_placement(config))
            self.models_changed.emit(self.engine.models())
            self.stack_changed.emit(self.engine.stack_info())

        self._run("memory", work)

    @Slot(str)
    def prepare_demo(self, folder: str) -> None:
        def work() -> None:
            library = ensure_demo_library(folder or None)
            self.demo_ready.emit(str(library.folder))

        self._run("demo", work)

    @Slot(dict)
    def set_dtype_overrides(self, overrides: dict[str, str]) -> None:
        self.engine.dtype_overrides = dict(overrides)
