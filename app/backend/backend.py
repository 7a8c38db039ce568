"""The GUI thread's handle on the session: one worker QThread, one way to submit work.

Every operation is a method here that submits a job (a closure over the :class:`Session`) to the
generic :class:`~app.backend.worker.TaskRunner` on the worker thread; jobs run one at a time, in
order. What they post comes back as this object's typed signals, routed by the snapshot's type and
always delivered in the GUI thread. :meth:`interrupt` sets the session's stop flag directly, so it
takes effect while the worker is busy. The window never touches the session: it gets snapshots,
and :attr:`placement` (the latest :class:`PlacementInfo`); the memory figures (plain numbers,
taken on the worker) follow every memory decision as :attr:`memory_changed`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, Signal

from app.backend.hash_relay import SCAN_BATCH_INTERVAL, HashRelay
from app.backend.leases import WindowLeases
from app.backend.merge_task import merge_work
from app.backend.messages import (
    DemoReady,
    FilesReleased,
    MemoryFigures,
    Models,
    PlacementInfo,
    ScanBatch,
    ScanDone,
    Task,
    TaskProgress,
)
from app.backend.progress_words import generate_words, load_progress, scan_progress
from app.backend.worker import Job, Reporter, TaskRunner
from app.demo import ensure_demo_library
from core.files.destination import check_output_folder
from core.generate.events import GenerateProgress, GenerateResult
from core.generate.generator import Generator
from core.generate.request import ImageSettings
from core.generate.session_run import Output
from core.library import Entry
from core.library.hasher import HashProgress
from core.merging.merge import MergeResult
from core.merging.recipe import MergeRecipe
from core.queue.session_grid import SessionGrid, run_session_grid
from core.session import ModelInfo, PlacementConfig, RunReport, Session, SessionEvent, SlotId, StackInfo
from core.session.loras import StackChange
from core.session.testrun import RunConfig, StepDone


class Backend(QObject):
    busy_changed = Signal(bool)
    started = Signal(str)
    progress = Signal(object)  # TaskProgress
    entries_found = Signal(list)  # list[Entry], listed or filled in
    scan_done = Signal(list)  # list[str]: folders skipped and why
    model_loaded = Signal(object)  # ModelInfo
    models_changed = Signal(tuple)  # tuple[ModelInfo, ...]
    stack_changed = Signal(object)  # StackInfo
    run_done = Signal(object)  # RunReport
    generate_progress = Signal(object)  # GenerateProgress (each step, with the live preview)
    generated = Signal(object)  # GenerateResult
    failed = Signal(object)  # TaskError
    interrupted = Signal(str)
    event = Signal(object)  # EngineEvent
    demo_ready = Signal(str)  # the demo library's folder
    placement_changed = Signal(object)  # PlacementInfo
    memory_changed = Signal(object)  # MemoryFigures, after each memory decision and task
    finished = Signal(str)
    hash_progress = Signal(object)  # HashProgress of the background hash pass (its own thread)
    merged = Signal(object)  # MergeResult: a merged model file was written

    _submit = Signal(object)  # Job, queued to the runner's thread

    def __init__(self, session: Session, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session = session  # the worker's: only jobs touch it
        self.generator = Generator(session)  # its caches live as long as the session
        self.stop_flag: threading.Event = session.interrupt
        self.placement: PlacementInfo = session.placement.describe()  # read before the worker starts
        self._strengths: dict[str, tuple[float, float]] = {}
        self._strengths_lock = threading.Lock()
        #: the files kept mapped, under read leases (app/backend/leases.py); checked before each job
        self.leases = WindowLeases(self)
        self.thread = QThread()
        self.thread.setObjectName("loadout-backend")
        self.worker = TaskRunner(self.stop_flag)
        self.worker.moveToThread(self.thread)
        session.on_event = self._relay_event  # memory decisions, relayed as they happen
        self._submit.connect(self.worker.run)
        self._routes: dict[type, Callable[[object], None]] = {
            ModelInfo: self.model_loaded.emit,
            Models: lambda m: self.models_changed.emit(m.models),  # type: ignore[attr-defined]
            StackInfo: self.stack_changed.emit,
            RunReport: self.run_done.emit,
            GenerateProgress: self.generate_progress.emit,
            GenerateResult: self.generated.emit,
            SessionEvent: self.event.emit,
            PlacementInfo: self._placement_changed,
            MemoryFigures: self.memory_changed.emit,
            ScanBatch: lambda b: self.entries_found.emit(list(b.entries)),  # type: ignore[attr-defined]
            ScanDone: lambda d: self.scan_done.emit(list(d.problems)),  # type: ignore[attr-defined]
            DemoReady: lambda d: self.demo_ready.emit(d.folder),  # type: ignore[attr-defined]
            HashProgress: self.hash_progress.emit,
            FilesReleased: self.leases.released,
            MergeResult: self.merged.emit,
        }
        # Full-file hashes on a thread of their own (never behind a load), paused while a task runs;
        # what it finds is relayed like the scan's entries.
        self.hasher = HashRelay(session.library, self.worker.post).hasher
        self.busy_changed.connect(lambda busy: self.hasher.pause() if busy else self.hasher.resume())
        self._pending = 0
        self.current_task: str | None = None
        queued = Qt.ConnectionType.QueuedConnection  # the receiver (self) lives in the GUI thread
        w = self.worker
        for source, target in (
            (w.started, self.started), (w.progress, self.progress), (w.failed, self.failed),
            (w.interrupted, self.interrupted), (w.finished, self.finished),
        ):  # fmt: skip
            source.connect(target, queued)
        w.result.connect(self._route, queued)
        self.started.connect(self._on_started)
        self.finished.connect(self._on_finished)
        self.thread.start()

    # -- plumbing --------------------------------------------------------------------------------
    def _route(self, result: object) -> None:
        self._routes[type(result)](result)

    def _placement_changed(self, info: object) -> None:
        assert isinstance(info, PlacementInfo)
        self.placement = info
        self.placement_changed.emit(info)

    def submit(
        self,
        task: Task,
        work: Callable[[Reporter], None],
        path: Path | None = None,
        maps: tuple[Path, ...] = (),
    ) -> None:
        """Run ``work`` on the worker thread (after the jobs already submitted); ``path`` and
        ``maps`` (the files it maps) are held under leases before it starts."""
        self._submitted()
        self._submit.emit(Job(task, self.leases.guarded(work, path, maps), path))

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

    def _used(self, r: Reporter, paths: list[Path]) -> None:
        """Note that ``paths`` were used now (the library's "last used"), and show it."""
        changed = self.session.library.note_used(paths)
        if changed:
            r.post(ScanBatch(tuple(changed)))

    def stop_hashing(self) -> None:
        """Drop the background hash pass (the file being read is abandoned; hashes found stay)."""
        self.hasher.cancel()

    def _relay_event(self, event: SessionEvent) -> None:
        """A memory decision, on the thread that took it: the event, then the figures after it
        (read there, so the window never reads the session)."""
        self.worker.post(event)
        self.worker.post(self.session.placement.memory_figures())

    def post_snapshots(self, r: Reporter) -> None:
        r.post(Models(self.session.models()))
        r.post(self.session.loras.info())
        r.post(self.session.placement.memory_figures())

    # -- operations ------------------------------------------------------------------------------
    def scan(self, folders: list[str]) -> None:
        names = [str(f) for f in folders]

        def work(r: Reporter) -> None:
            batch: list[Entry] = []
            last = time.monotonic()
            try:
                for entry in self.session.library.scan(
                    names, lambda p: r.progress(scan_progress(p)), r.check
                ):
                    batch.append(entry)
                    if time.monotonic() - last >= SCAN_BATCH_INTERVAL:
                        r.post(ScanBatch(tuple(batch)))
                        batch, last = [], time.monotonic()
            finally:
                if batch:
                    r.post(ScanBatch(tuple(batch)))
            r.post(ScanDone(tuple(self.session.library.problems)))
            self.hasher.submit(self.session.library.hash_jobs())

        self.submit("scan", work)

    def load(self, path: Path | str, kind: str) -> None:
        def work(r: Reporter) -> None:
            r.post(self.session.load(Path(path), kind, lambda p: r.progress(load_progress(p)), r.check))
            self.post_snapshots(r)
            self._used(r, [Path(path)])

        self.submit("load", work, Path(path))

    def unload(self, key: str) -> None:
        def work(r: Reporter) -> None:
            self.session.unload(SlotId.parse(key))
            self.post_snapshots(r)

        self.submit("unload", work)

    def add_lora(self, path: Path | str, model: float = 1.0, clip: float = 1.0, force: bool = False) -> None:
        def work(r: Reporter) -> None:
            r.post(self.session.loras.add(Path(path), float(model), float(clip), force))
            r.post(Models(self.session.models()))
            self._used(r, [Path(path)])

        self.submit("lora", work, Path(path))

    def merge_models(self, paths: list[Path], recipe: MergeRecipe, out: Path) -> None:
        """Merge models into ``out`` through the session's placement (core.merging)."""
        self.submit("merge", merge_work(self.session, paths, recipe, out), maps=tuple(paths))

    def change_stack(self, change: StackChange) -> None:
        """Several stack changes as one task (a picture's settings): the weights follow once."""

        def work(r: Reporter) -> None:
            r.post(self.session.loras.change(change))
            r.post(Models(self.session.models()))
            self._used(r, [path for path, _m, _c in change.add])

        self.submit("lora", work, maps=tuple(Path(path) for path, _m, _c in change.add))

    def preview_strength(self, lora_id: str, model: float, clip: float) -> None:
        """A slider moving: shown at once through the session's fast path (low-rank side paths),
        coalesced: however many moves arrive while one preview runs, only the newest is applied.
        No started/finished: it is instant."""
        with self._strengths_lock:
            first = not self._strengths
            self._strengths[lora_id] = (float(model), float(clip))
        if first:
            self._submit.emit(Job("strength", self._preview, framed=False))

    def _preview(self, r: Reporter) -> None:
        with self._strengths_lock:
            pending, self._strengths = self._strengths, {}
        info = None
        for lora_id, (model, clip) in pending.items():
            info = self.session.loras.set_strength(lora_id, model, clip, bake=False)
        if info is not None:
            r.post(info)

    def bake_strength(self, lora_id: str, model: float, clip: float) -> None:
        """A slider released or a value typed: bake it into the weights."""
        with self._strengths_lock:
            self._strengths.pop(lora_id, None)  # a bake supersedes a pending preview
        strengths = (float(model), float(clip))
        self.submit(
            "strength", lambda r: r.post(self.session.loras.set_strength(lora_id, *strengths, bake=True))
        )

    def set_enabled(self, lora_id: str, enabled: bool) -> None:
        self.submit("lora", lambda r: r.post(self.session.loras.set_enabled(lora_id, enabled)))

    def remove_lora(self, lora_id: str) -> None:
        def work(r: Reporter) -> None:
            r.post(self.session.loras.remove(lora_id))
            r.post(Models(self.session.models()))

        self.submit("lora", work)

    def reorder(self, order: list[str]) -> None:
        ids = list(order)
        self.submit("lora", lambda r: r.post(self.session.loras.reorder(ids)))

    def test_run(self, config: RunConfig) -> None:
        def work(r: Reporter) -> None:
            def step(s: StepDone) -> None:
                r.progress(
                    TaskProgress("run", s.step, s.steps, f"Step {s.step}/{s.steps}: {s.seconds:.3f} s")
                )

            try:
                r.post(self.session.test_run(config, step, r.check))
            finally:  # the run placed the model: show where it is now
                if self.session.placement.active:
                    self.post_snapshots(r)

        self.submit("run", work)

    def generate(self, settings: ImageSettings, folder: Path | str, sweep: SessionGrid | None = None) -> None:
        """Make pictures with the loaded model and its LoRA stack, saved as numbered PNGs in
        ``folder``; each step posts its progress and live preview. ``sweep``: a grid made on the
        loaded models, cell after cell (a LoRA strength sweep), and its grid picture."""
        output = Output(Path(folder), is_folder=True)

        def work(r: Reporter) -> None:
            def step(p: GenerateProgress) -> None:
                r.post(p)
                r.progress(TaskProgress("generate", p.step, p.steps, generate_words(p)))

            check_output_folder(output.path)  # before any work: an unwritable folder is said at once
            try:
                if sweep is not None:
                    r.post(run_session_grid(self.generator, settings, sweep, output, step, r.check))
                else:
                    r.post(self.generator.generate(settings, output, step, r.check))
                used = [m.path for m in self.session.models()]
                self._used(r, used + [lo.path for lo in self.session.loras.info().loras if lo.enabled])
            finally:  # the phases placed models (and a sweep moved a strength): show them as they are
                if self.session.placement.active:
                    self.post_snapshots(r)
                elif sweep is not None:
                    r.post(self.session.loras.info())

        self.submit("generate", work, maps=settings.mapped_files)  # held before the first map

    def set_dtype_overrides(self, overrides: dict[str, str]) -> None:
        """Storage dtypes per role for the next loads (applied on the worker, after queued loads)."""
        chosen = dict(overrides)

        def work(r: Reporter) -> None:
            self.session.dtype_overrides = chosen

        self._submit.emit(Job("load", work, framed=False))

    def place(self, key: str, role: str | None = None) -> None:
        """Load a loaded model's components (or the one with ``role``) to the GPU; the memory
        manager decides how much."""
        self._memory(lambda: self.session.place(SlotId.parse(key), role or None))

    def offload(self, key: str, role: str | None = None) -> None:
        """Move a model's components (or one) back to system RAM."""
        self._memory(lambda: self.session.offload(SlotId.parse(key), role or None))

    def _memory(self, move: Callable[[], object]) -> None:
        def work(r: Reporter) -> None:
            try:
                move()
            finally:  # a refused or stopped placement still shows where everything is
                self.post_snapshots(r)

        self.submit("memory", work)

    def configure_memory(self, config: PlacementConfig) -> None:
        """New memory settings (VRAM mode, reserve, simulated card): applied on the worker."""

        def work(r: Reporter) -> None:
            r.post(self.session.configure(config))
            self.post_snapshots(r)

        self.submit("memory", work)

    def prepare_demo(self, folder: Path | str | None = None) -> None:
        """Generate the demo library (once; in the worker, it takes a few seconds)."""
        where = str(folder) if folder else None
        self.submit("demo", lambda r: r.post(DemoReady(str(ensure_demo_library(where).folder))))

    # -- stopping --------------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Stop the running task and the background hash pass. Thread-safe and immediate: sets
        the flag core checks between tensors, files and steps (never a queued call, which would
        wait for the task to end). Hashes found so far are kept; the next scan resumes the pass."""
        self.hasher.cancel()
        if self.busy:
            self.stop_flag.set()

    def shutdown(self, timeout_ms: int = 15000) -> bool:
        """Stop the running task, end the worker thread and wait for it. True when it ended."""
        self.hasher.stop()
        if not self.thread.isRunning():
            self.leases.release_all()
            return True
        self.stop_flag.set()
        self.thread.quit()
        ended = bool(self.thread.wait(timeout_ms))
        self.stop_flag.clear()
        if ended:  # models dropped later (at exit) must not emit through a deleted worker
            self.session.on_event = lambda event: None
            self.leases.release_all()
        return ended
