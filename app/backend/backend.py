"""The GUI thread's handle on the worker: starts its QThread, queues requests, stops work.

Panels are handed this object and talk to the engine only through it: requests go out as queued
signals to the :class:`Worker`'s slots (they run on the worker thread, one at a time, in order);
results come back as this object's signals, re-emitted in the GUI thread. :meth:`interrupt` sets
the stop flag directly, so it takes effect while the worker is busy.
"""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, Signal

from app.backend.engine import Engine
from app.backend.placement import PlacementConfig
from app.backend.worker import Worker
from core.run.testrun import RunConfig

#: the worker's result signals, re-emitted by the Backend in the GUI thread
RELAYED = (
    "started", "progress", "entries_found", "scan_done", "model_loaded", "models_changed", "stack_changed",
    "run_done", "failed", "interrupted", "event", "demo_ready", "placement_changed", "finished",
)  # fmt: skip


class Backend(QObject):
    """Results come out as this object's signals, always delivered in the GUI thread (a plain
    function connected straight to a worker signal would run on the worker thread)."""

    busy_changed = Signal(bool)
    started = Signal(str)
    progress = Signal(object)  # TaskProgress
    entries_found = Signal(list)  # list[Entry]
    scan_done = Signal(list)  # list[str]
    model_loaded = Signal(object)  # ModelInfo
    models_changed = Signal(tuple)  # tuple[ModelInfo, ...]
    stack_changed = Signal(object)  # StackInfo
    run_done = Signal(object)  # RunReport
    failed = Signal(object)  # TaskError
    interrupted = Signal(str)
    event = Signal(object)  # EngineEvent
    demo_ready = Signal(str)
    placement_changed = Signal(object)  # PlacementInfo
    finished = Signal(str)

    # requests, queued to the worker's thread
    _scan = Signal(object)
    _load = Signal(str, str)
    _unload = Signal(str)
    _add_lora = Signal(str, float, float, bool)
    _bake = Signal(str, float, float)
    _preview = Signal()
    _enable = Signal(str, bool)
    _remove = Signal(str)
    _reorder = Signal(list)
    _run = Signal(object)
    _dtypes = Signal(dict)
    _demo = Signal(str)
    _place = Signal(str, str)
    _offload = Signal(str, str)
    _memory = Signal(object)

    def __init__(self, engine: Engine, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.stop_flag = threading.Event()
        self.engine = engine
        self.thread = QThread()
        self.thread.setObjectName("loadout-backend")
        self.worker = Worker(engine, self.stop_flag)
        self.worker.moveToThread(self.thread)
        w = self.worker
        for signal, slot in (
            (self._scan, w.scan),
            (self._load, w.load),
            (self._unload, w.unload),
            (self._add_lora, w.add_lora),
            (self._bake, w.bake_strength),
            (self._preview, w.preview_strengths),
            (self._enable, w.set_enabled),
            (self._remove, w.remove_lora),
            (self._reorder, w.reorder),
            (self._run, w.test_run),
            (self._dtypes, w.set_dtype_overrides),
            (self._demo, w.prepare_demo),
            (self._place, w.place),
            (self._offload, w.offload),
            (self._memory, w.configure_memory),
        ):
            signal.connect(slot)
        self._pending = 0
        self.current_task: str | None = None
        self.started.connect(self._on_started)
        self.finished.connect(self._on_finished)
        for name in RELAYED:  # queued: the receiver (self) lives in the GUI thread
            getattr(w, name).connect(getattr(self, name), Qt.ConnectionType.QueuedConnection)
        self.thread.start()

    # -- state ----------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._pending > 0

    def _submitted(self) -> None:
        self._pending += 1
        if self._pending == 1:
            self.busy_changed.emit(True)

    def _on_started(self, task: str) -> None:
        self.current_task = task

    def _on_finished(self, task: str) -> None:
        self._pending = max(0, self._pending - 1)
        if self._pending == 0:
            self.current_task = None
            self.busy_changed.emit(False)

    # -- requests -------------------------------------------------------------------------------
    def scan(self, folders: list[str]) -> None:
        self._submitted()
        self._scan.emit([str(f) for f in folders])

    def load(self, path: Path | str, kind: str) -> None:
        self._submitted()
        self._load.emit(str(path), kind)

    def unload(self, key: str) -> None:
        self._submitted()
        self._unload.emit(key)

    def add_lora(self, path: Path | str, model: float = 1.0, clip: float = 1.0, force: bool = False) -> None:
        self._submitted()
        self._add_lora.emit(str(path), float(model), float(clip), force)

    def preview_strength(self, lora_id: str, model: float, clip: float) -> None:
        """A slider moving: shown at once through the engine's fast path, coalesced."""
        if self.worker.post_preview(lora_id, float(model), float(clip)):
            self._preview.emit()

    def bake_strength(self, lora_id: str, model: float, clip: float) -> None:
        """A slider released or a value typed: bake it into the weights."""
        self._submitted()
        self._bake.emit(lora_id, float(model), float(clip))

    def set_enabled(self, lora_id: str, enabled: bool) -> None:
        self._submitted()
        self._enable.emit(lora_id, enabled)

    def remove_lora(self, lora_id: str) -> None:
        self._submitted()
        self._remove.emit(lora_id)

    def reorder(self, order: list[str]) -> None:
        self._submitted()
        self._reorder.emit(list(order))

    def test_run(self, config: RunConfig) -> None:
        self._submitted()
        self._run.emit(config)

    def set_dtype_overrides(self, overrides: dict[str, str]) -> None:
        self._dtypes.emit(dict(overrides))

    def place(self, key: str, role: str | None = None) -> None:
        """Load a loaded model's components (or the one with ``role``) to the GPU; the memory
        manager decides how much."""
        self._submitted()
        self._place.emit(key, role or "")

    def offload(self, key: str, role: str | None = None) -> None:
        """Move a model's components (or one) back to system RAM."""
        self._submitted()
        self._offload.emit(key, role or "")

    def configure_memory(self, config: PlacementConfig) -> None:
        """New memory settings (VRAM mode, reserve, simulated card): applied on the worker."""
        self._submitted()
        self._memory.emit(config)

    def prepare_demo(self, folder: Path | str | None = None) -> None:
        """Generate the demo library (once; in the worker, it takes a few seconds)."""
        self._submitted()
        self._demo.emit(str(folder) if folder else "")

    # -- stopping -------------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Stop the running task. Thread-safe and immediate: sets the flag core checks between
        tensors, files and steps (never a queued call, which would wait for the task to end)."""
        if self.busy:
            self.stop_flag.set()

    def shutdown(self, timeout_ms: int = 15000) -> bool:
        """Stop the running task, end the worker thread and wait for it. True when it ended."""
        if not self.thread.isRunning():
            return True
        self.stop_flag.set()
        self.thread.quit()
        ended = bool(self.thread.wait(timeout_ms))
        self.stop_flag.clear()
        if ended:  # models dropped later (at exit) must not emit through a deleted worker
            self.engine.emit = lambda event: None
        return ended
