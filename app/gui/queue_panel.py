"""The Queue panel: X/Y/Z grids queued from the Generate panel's settings, the jobs with their
progress (pause, stop, cancel, reorder, retry), the total, and the current grid growing cell by
cell (double-click a cell to open it).

Jobs live in the queue file (core/queue/store.py), so they outlive the window. They run on the
backend's worker thread: in-process on the window's own Session (the default), or on the Ray
cluster named in Settings. The panel reads the store on a timer; the store is thread-safe.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QIcon, QPixmap
from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import Models
from app.backend.worker import Reporter
from core.errors import LoadoutError
from core.files.atomic import write_error
from core.generate.naming import new_folder
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles
from core.patching.merge import LoraArg
from core.queue.cluster_support import ray_pool_module
from core.queue.grid import parse_axis
from core.queue.grid_jobs import grid_jobs
from core.queue.runner import LocalPool, Pool, QueueRunner
from core.queue.store import JobStore, QueuedJob
from core.queue.worker import Worker
from core.session.snapshots import ModelInfo, SessionEvent, StackInfo

if TYPE_CHECKING:
    pass

_STATE_WORDS = {
    "queued": "queued",
    "running": "running",
    "done": "done",
    "failed": "failed",
    "cancelled": "cancelled",
}


class QueuePanel(QWidget):
    open_image = Signal(str)  # a finished cell's picture, to show in the viewer
    finished_images = Signal(object)  # list[tuple[Path, str]]: new pictures (cells, grids) and labels
    error = Signal(object)  # LoadoutError

    def __init__(
        self,
        backend: Backend,
        store: JobStore,
        settings: Callable[[], ImageSettings],
        output_folder: Callable[[], Path],
        ray_address: Callable[[], str] = lambda: "",
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.backend = backend
        self.store = store
        self.settings = settings
        self.output_folder = output_folder
        self.ray_address = ray_address
        self.runner: QueueRunner | None = None
        self._models: dict[str, ModelInfo] = {}
        self._loras: tuple[LoraArg, ...] = ()
        self._grid = ""  # the grid shown
        self._reported: set[Path] = set()  # pictures already handed to the gallery

        self.axes = {a: QLineEdit(placeholderText=p) for a, p in
                     (("x", "seed:1,2,3"), ("y", "cfg:5,7 (optional)"), ("z", "optional"))}  # fmt: skip
        form = QFormLayout()
        for a, edit in self.axes.items():
            form.addRow(f"{a.upper()} axis", edit)
        buttons = self._build_buttons()
        self.jobs = QListWidget()
        self.jobs.setToolTip("Double-click a finished job to open its picture")
        self.jobs.itemDoubleClicked.connect(self._open_job)
        self.total = QProgressBar()
        self.total.setRange(0, 1000)
        self.grid = QTableWidget()
        self.grid.setIconSize(QSize(96, 96))
        self.grid.cellDoubleClicked.connect(self._open_cell)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(buttons)
        layout.addWidget(self.jobs, 1)
        layout.addWidget(self.total)
        layout.addWidget(self.grid, 2)
        backend.models_changed.connect(self._on_models)
        backend.model_loaded.connect(lambda info: self._on_models((*self._models.values(), info)))
        backend.stack_changed.connect(self._on_stack)
        self.timer = QTimer(self, interval=250)
        self.timer.timeout.connect(self.refresh)
        with contextlib.suppress(LoadoutError):  # a queue file in trouble: refresh says so
            self.pause_button.setChecked(store.paused)
        # after a relaunch: the last grid is shown again, and what is on disk is not reported anew
        earlier = self.store.jobs()
        self._grid = next((q.job.grid for q in reversed(earlier) if q.job.grid), "")
        self._reported = {p for q in earlier for p in (*q.images, q.job.grid_file) if p is not None}
        self.refresh()

    def _build_buttons(self) -> QVBoxLayout:
        """Queue the grid; run, pause and stop the queue; cancel, move and retry the selected job."""
        self.queue_button = QPushButton("Queue grid")
        self.queue_button.clicked.connect(self.queue_grid)
        self.run_button = QPushButton("Run")
        self.run_button.clicked.connect(self.run)
        self.pause_button = QPushButton("Pause", checkable=True)
        self.pause_button.toggled.connect(self._pause)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(lambda: self._on_selected(self.cancel))
        self.up_button = QPushButton("Up")
        self.up_button.clicked.connect(lambda: self._on_selected(lambda j: self.move(j, -1)))
        self.down_button = QPushButton("Down")
        self.down_button.clicked.connect(lambda: self._on_selected(lambda j: self.move(j, 1)))
        self.retry_button = QPushButton("Retry")
        self.retry_button.clicked.connect(lambda: self._on_selected(self.retry))
        # two rows: the queue's own, and the selected job's (eight in one row were clipped in a dock)
        buttons = QVBoxLayout()
        queue = (self.queue_button, self.run_button, self.pause_button, self.stop_button)
        selected = (self.cancel_button, self.up_button, self.down_button, self.retry_button)
        for row_buttons in (queue, selected):
            row = QHBoxLayout()
            for b in row_buttons:
                row.addWidget(b)
            buttons.addLayout(row)
        return buttons

    # -- what the window has loaded --------------------------------------------------------------
    def _on_models(self, models: tuple[ModelInfo, ...]) -> None:
        self._models = {m.key: m for m in models}

    def _on_stack(self, stack: StackInfo) -> None:
        self._loras = tuple(
            LoraArg(lo.path, lo.model_strength, lo.clip_strength) for lo in stack.loras if lo.enabled
        )

    def base_request(self) -> GenerateRequest:
        main = self._models.get("main")
        if main is None:
            raise LoadoutError(
                "no model is loaded", fix="Load a checkpoint first, then queue a grid", code="no_model"
            )
        others = [m for k, m in self._models.items() if k != "main"]
        files = ModelFiles(
            checkpoint=main.path if main.kind == "checkpoint" else None,
            diffusion_model=main.path if main.kind != "checkpoint" else None,
            text_encoders=tuple(m.path for m in others if m.kind == "text_encoder"),
            vae=next((m.path for m in others if m.kind == "vae"), None),
        )
        return GenerateRequest(files, self.settings(), loras=self._loras)

    # -- actions ---------------------------------------------------------------------------------
    def queue_grid(self) -> list[int]:
        """The grid of the axes typed in, over the Generate panel's settings and the loaded models."""
        try:
            x, y, z = (parse_axis(e.text()) if e.text().strip() else None for e in self.axes.values())
            if x is None:
                raise LoadoutError(
                    "a grid needs an X axis", fix="Type one like seed:1,2,3", code="bad_argument"
                )
            request = self.base_request()
            try:  # a folder of its own, even for two grids queued in the same second
                folder = new_folder(self.output_folder() / "grids", time.strftime("%Y%m%d-%H%M%S"))
            except OSError as exc:
                raise write_error(self.output_folder() / "grids", exc) from None
            grid = folder.name
            ids = self.store.add(grid_jobs(request, folder, x, y, z, grid=grid))
        except LoadoutError as exc:
            self.error.emit(exc)
            return []
        self._grid = grid
        self.refresh()
        return ids

    def _pool(self) -> Pool:
        address = self.ray_address().strip()
        if not address:
            return LocalPool(Worker("local", session=self.backend.session))
        ray_pool = (
            ray_pool_module()
        )  # the optional extra, only when a cluster is chosen; plain words if absent
        return ray_pool.RayPool(ray_pool.connect(address))

    def run(self) -> None:
        """Run the queued jobs on the backend's worker thread (after what it is doing now)."""
        if self.runner is not None:
            return
        session = self.backend.session

        def work(r: Reporter) -> None:
            pool = self._pool()

            def relay(events: list[tuple[str, SessionEvent]]) -> None:
                for worker, e in events:  # a Ray worker's loads and memory decisions, in the event list
                    r.post(SessionEvent(time.monotonic(), e.kind, f"{worker}: {e.label}", e.reason))

            self.runner = QueueRunner(self.store, pool, on_events=relay)
            try:
                self.runner.run()
            finally:
                self.runner = None
                close = getattr(pool, "close", None)
                if close is not None:
                    close()
                r.post(Models(session.models()))
                r.post(session.loras.info())

        self.timer.start()
        self.backend.submit("queue", work)

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()

    def may_quit(self, ask: Callable[[str], bool]) -> bool:
        """Whether the window may close: yes, unless a job runs and ``ask`` is answered no."""
        if not list(self.store.jobs("running")) and self.runner is None:
            return True
        return ask(
            "A queued job is running. Quit anyway? It is stopped now and stays in the queue: "
            "Run continues it at the next start."
        )

    def _pause(self, paused: bool) -> None:
        self.store.set_paused(paused)
        self.pause_button.setText("Resume" if paused else "Pause")

    def cancel(self, job_id: int) -> None:
        runner = self.runner
        if runner is not None:
            runner.cancel(job_id)
        else:
            self.store.cancel(job_id)

    def move(self, job_id: int, delta: int) -> None:
        order = [j.id for j in self.store.jobs()]
        self.store.move(job_id, max(0, order.index(job_id) + delta))

    def retry(self, job_id: int) -> None:
        self.store.retry(job_id)

    def _on_selected(self, action: Callable[[int], None]) -> None:
        item = self.jobs.currentItem()
        if item is not None:
            action(int(item.data(Qt.ItemDataRole.UserRole)))
            self.refresh()

    # -- showing ---------------------------------------------------------------------------------
    def refresh(self) -> None:
        try:
            jobs = self.store.jobs()
            totals = self.store.totals()
        except LoadoutError as exc:  # the queue file held elsewhere, a full disk: said, tried again later
            self.timer.stop()
            self.error.emit(exc)
            return
        selected = self.jobs.currentItem()
        keep = selected.data(Qt.ItemDataRole.UserRole) if selected is not None else None
        self.jobs.clear()
        for q in jobs:
            item = QListWidgetItem(self._describe(q))
            item.setData(Qt.ItemDataRole.UserRole, q.id)
            item.setToolTip(q.error or str(q.job.request.output))
            self.jobs.addItem(item)
            if q.id == keep:
                self.jobs.setCurrentItem(item)
        totals = self.store.totals()
        self.total.setValue(int(1000 * totals.fraction) if jobs else 0)  # no 100 % bar on an empty queue
        self._report_new(jobs)
        self._show_grid([q for q in jobs if q.job.grid == self._grid and q.job.grid])
        if self.runner is None and not any(q.state == "running" for q in jobs):
            self.timer.stop()

    @staticmethod
    def _describe(q: QueuedJob) -> str:
        s = q.job.request.image.sampling
        where = " ".join(label for label in q.job.labels if label) or f"seed {s.seed}"
        progress = f" {int(100 * q.progress)}%" if q.state == "running" else ""
        worker = f" on {q.worker}" if q.worker and q.state in ("running", "done") else ""
        model = q.job.request.models.paths[0].stem
        return f"#{q.id} {model} · {where}: {_STATE_WORDS[q.state]}{progress}{worker}"

    def _show_grid(self, cells: list[QueuedJob]) -> None:
        z0 = [q for q in cells if q.job.z == 0]
        if not z0:
            self.grid.setRowCount(0)
            self.grid.setColumnCount(0)
            return
        cols = 1 + max(q.job.x for q in z0)
        rows = 1 + max(q.job.y for q in z0)
        self.grid.setColumnCount(cols)
        self.grid.setRowCount(rows)
        for q in z0:
            self.grid.setHorizontalHeaderItem(q.job.x, QTableWidgetItem(q.job.labels[0]))
            self.grid.setVerticalHeaderItem(q.job.y, QTableWidgetItem(q.job.labels[1]))
            item = self.grid.item(q.job.y, q.job.x)
            if item is None:
                item = QTableWidgetItem()
                self.grid.setItem(q.job.y, q.job.x, item)
            done = q.state == "done" and bool(q.images)
            if done and item.data(Qt.ItemDataRole.UserRole) != str(q.images[0]):
                item.setIcon(QIcon(QPixmap(str(q.images[0]))))
                item.setData(Qt.ItemDataRole.UserRole, str(q.images[0]))
            item.setText("" if done else q.state)
        for c in range(cols):
            self.grid.setColumnWidth(c, 104)
        for r in range(rows):
            self.grid.setRowHeight(r, 104)

    def _report_new(self, jobs: list[QueuedJob]) -> None:
        """Finished cells and drawn grids not reported yet go to the gallery, labelled by job and cell."""
        new: list[tuple[Path, str]] = []
        for q in jobs:
            if q.state != "done":
                continue
            where = " ".join(label for label in q.job.labels if label)
            for path in q.images:
                if path not in self._reported:
                    self._reported.add(path)
                    new.append((path, f"#{q.id} {where}".strip()))
            grid = q.job.grid_file
            if grid is not None and grid not in self._reported and grid.is_file():
                self._reported.add(grid)
                new.append((grid, f"grid {q.job.grid}"))
        if new:
            self.finished_images.emit(new)

    def _open_job(self, item: QListWidgetItem) -> None:
        job_id = int(item.data(Qt.ItemDataRole.UserRole))
        q = next((j for j in self.store.jobs() if j.id == job_id), None)
        if q is not None and q.images:
            self.open_image.emit(str(q.images[0]))
        if q is not None and q.job.grid and q.job.grid != self._grid:
            self._grid = q.job.grid  # its grid is the one shown
            self.refresh()

    def _open_cell(self, row: int, column: int) -> None:
        item = self.grid.item(row, column)
        path = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if path:
            self.open_image.emit(str(path))
