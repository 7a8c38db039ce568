"""The test run panel: N denoising passes of the loaded model at a chosen size and batch.

Sends a :class:`~core.session.testrun.RunConfig` to the backend and shows what the run cost
(seconds per step, peak memory) from the worker's :class:`RunReport`; earlier runs stay listed.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import RunReport, TaskProgress
from app.gui.theme import human_bytes, icon
from core.session.testrun import RunConfig


def _spin(lo: int, hi: int, value: int, step: int = 1, suffix: str = "") -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(lo, hi)
    spin.setSingleStep(step)
    spin.setValue(value)
    spin.setSuffix(suffix)
    spin.setMaximumWidth(110)
    return spin


class TestRunPanel(QWidget):
    def __init__(self, backend: Backend, device: str = "cpu", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.device = device
        self.model_loaded = False
        self.steps = _spin(1, 200, 4)
        self.width_ = _spin(64, 4096, 256, 64, " px")
        self.height_ = _spin(64, 4096, 256, 64, " px")
        self.batch = _spin(1, 16, 1)
        self.seed = _spin(0, 2**31 - 1, 0)
        self.seed.setMaximumWidth(140)
        size = QHBoxLayout()
        size.addWidget(self.width_)
        size.addWidget(QLabel("×"))
        size.addWidget(self.height_)
        size.addStretch(1)
        form = QFormLayout()
        form.addRow("Steps", self.steps)
        form.addRow("Size", size)
        form.addRow("Batch", self.batch)
        form.addRow("Seed", self.seed)
        self.run_button = QPushButton(icon("run", "#ffffff"), "Run test")
        self.run_button.setObjectName("primary")
        self.run_button.clicked.connect(self.run)
        self.progress = QProgressBar()
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.setValue(0)
        self.result = QLabel("Load a model, then run a few steps to learn what it costs on this machine.")
        self.result.setWordWrap(True)
        self.result.setObjectName("muted")
        self.history = QTreeWidget()
        self.history.setHeaderLabels(["s/step", "Size", "Steps", "Streamed/step", "Peak RAM"])
        self.history.setRootIsDecorated(False)
        self.history.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.run_button.setMaximumWidth(260)
        self.progress.setMaximumWidth(260)
        left = QVBoxLayout()
        left.addLayout(form)
        left.addWidget(self.run_button)
        left.addWidget(self.progress)
        left.addStretch(1)
        right = QVBoxLayout()
        right.addWidget(self.result)
        right.addWidget(self.history, 1)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addLayout(left)
        layout.addLayout(right, 1)
        w = backend
        w.progress.connect(self._on_progress)
        w.run_done.connect(self.show_report)
        w.started.connect(self._on_started)
        w.finished.connect(self._on_finished)
        self.set_model_loaded(False)

    def config(self) -> RunConfig:
        w, h = self.width_.value() // 8 * 8, self.height_.value() // 8 * 8
        return RunConfig(
            steps=self.steps.value(), width=w, height=h, batch=self.batch.value(), seed=self.seed.value(),
            device=self.device,
        )  # fmt: skip

    def run(self) -> None:
        self.backend.test_run(self.config())

    def set_model_loaded(self, loaded: bool) -> None:
        self.model_loaded = loaded
        self.run_button.setEnabled(loaded and not self.backend.busy)
        self.run_button.setToolTip("" if loaded else "Load a checkpoint or diffusion model first")

    def _on_started(self, task: str) -> None:
        self.run_button.setEnabled(False)
        if task == "run":
            self.progress.setRange(0, self.steps.value())
            self.progress.setValue(0)
            self.result.setText("Running…")

    def _on_finished(self, task: str) -> None:
        self.run_button.setEnabled(self.model_loaded and not self.backend.busy)
        if task == "run" and self.result.text() == "Running…":
            self.result.setText("The test run did not finish (stopped, or see the message above).")

    def _on_progress(self, p: TaskProgress) -> None:
        if p.task == "run":
            self.progress.setRange(0, p.total)
            self.progress.setValue(p.done)

    def show_report(self, r: RunReport) -> None:
        vram = human_bytes(r.peak_vram) if r.peak_vram is not None else "no GPU"
        if not r.placement:
            moved = "computed on the CPU from system RAM: nothing is copied to a device"
        elif r.streamed_bytes_per_step:
            moved = (
                f"<b>{human_bytes(r.streamed_bytes_per_step)} streamed per step</b>, "
                f"{human_bytes(r.resident_bytes)} resident on {r.placement}"
            )
        else:
            moved = f"all {human_bytes(r.resident_bytes)} resident on {r.placement}: nothing streamed"
        self.result.setToolTip(
            "Streamed: the layers that did not fit on the device are copied in by the ops layer at "
            "each step (patched on the way); resident layers stay on the device."
        )
        self.result.setText(
            f"<span style='font-size:14pt'><b>{r.seconds_per_step:.3f} s/step</b></span><br>"
            f"{r.steps} steps at {r.width}×{r.height}, batch {r.batch}, on {r.device} in {r.dtype}: "
            f"{r.total_seconds:.2f} s<br>peak RAM (Loadout) {human_bytes(r.peak_rss)} · VRAM {vram}<br>"
            f"<span style='color:#8a94a6'>{moved}</span>"
        )
        item = QTreeWidgetItem(
            [
                f"{r.seconds_per_step:.3f}",
                f"{r.width}×{r.height}×{r.batch}",
                str(r.steps),
                human_bytes(r.streamed_bytes_per_step) if r.placement else "-",
                human_bytes(r.peak_rss),
            ]
        )
        self.history.insertTopLevelItem(0, item)
        self.progress.setValue(self.progress.maximum())
