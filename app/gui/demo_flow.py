"""``loadout --demo``: open the window on the demo library; with ``--screenshot FILE`` also load the
demo checkpoint, apply the demo LoRA, change its strength, place its text encoder on the GPU (a
simulated card without one: it only partly fits), generate a picture (the manager swaps the text
encoder, diffusion model and VAE in turn), wait until the backend is idle, save a screenshot of the
whole window and quit (exit 0, or 1 if a step failed).

Driven only by the backend's signals, like a user would be: nothing here blocks the event loop.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QObject, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

from app.backend.messages import MAIN_KEY, ModelInfo, StackInfo, TaskError
from app.demo import TINY_CHECKPOINT, TINY_LORA


class DemoFlow(QObject):
    def __init__(
        self,
        window,
        *,
        screenshot: str | None,
        folder: str | None,
        timeout_s: float = 180.0,
        extra: str | None = None,
        first_launch: bool = False,
    ) -> None:  # type: ignore[no-untyped-def]
        super().__init__(window)
        self.first_launch = first_launch
        self.extra = Path(extra).resolve() if extra else None
        self.window = window
        self.screenshot = screenshot
        self.folder = folder
        self.root: Path | None = None
        self.exit_code: int | None = None
        self.errors: list[str] = []
        self.step = "demo"
        w = window.backend
        w.demo_ready.connect(self._on_demo_ready)
        w.scan_done.connect(self._on_scanned)
        w.model_loaded.connect(self._on_loaded)
        w.stack_changed.connect(self._on_stack)
        w.generated.connect(self._on_generated)
        w.models_changed.connect(self._on_models)
        w.failed.connect(self._on_failed)
        window.backend.busy_changed.connect(self._on_busy)
        self.timeout = QTimer(self)
        self.timeout.setSingleShot(True)
        self.timeout.setInterval(int(timeout_s * 1000))
        self.timeout.timeout.connect(
            lambda: self._finish(f"the demo did not finish within {timeout_s:.0f} s")
        )

    def start(self) -> None:
        if self.screenshot:
            self.timeout.start()
        self.window.backend.prepare_demo(self.folder)

    def _on_demo_ready(self, folder: str) -> None:
        self.root = Path(folder)
        self.step = "scan"

    def _on_scanned(self, _problems: list[str]) -> None:
        if self.step != "scan" or self.root is None:
            return
        checkpoint = self.root / TINY_CHECKPOINT
        self.window.browser.select_path(checkpoint)
        if not self.screenshot:
            self.step = "done"
            return
        if self.first_launch:  # as an artist first sees it: the library read, nothing loaded yet
            self.step = "shoot"
            QTimer.singleShot(600, lambda: self._finish(None))
            return
        self.step = "load"
        entry = self.window.browser.current_entry()
        if entry is None:
            self._finish(f"{checkpoint.name} was not found in the demo library")
            return
        self.window.load_entry(entry)

    def _on_loaded(self, _info: ModelInfo) -> None:
        if self.step == "load" and self.root is not None:
            self.step = "lora"
            self.window.backend.add_lora(self.root / TINY_LORA, 0.8, 0.6)

    def _on_stack(self, info: StackInfo) -> None:
        if self.step == "lora" and info.loras:
            self.step = "strength"
            self.window.backend.bake_strength(info.loras[0].id, 0.65, 0.5)
        elif self.step == "strength" and info.loras and info.baked:
            if self.window.placement.active:
                self.step = "place"
                self.window.backend.place(MAIN_KEY, "text_encoder")
            else:
                self._generate()

    def _on_models(self, models: tuple[ModelInfo, ...]) -> None:
        main = next((m for m in models if m.is_main), None)
        if self.step == "place" and main is not None and any(c.placed for c in main.components):
            self._generate()

    def _generate(self) -> None:
        self.step = "generate"
        panel = self.window.generate_panel
        panel.prompt.setPlainText("a lighthouse on a cliff at dusk, (volumetric light:1.2), oil painting")
        panel.negative.setPlainText("blurry, lowres")
        panel.seed.setText("20261125")
        panel.steps.setValue(8)
        panel.sampler.setCurrentIndex(max(0, panel.sampler.findData("dpmpp_2m")))
        panel.scheduler.setCurrentIndex(max(0, panel.scheduler.findData("karras")))
        panel.size.setCurrentIndex(panel.size.count() - 1)  # custom
        panel.width_.setValue(256)
        panel.height_.setValue(256)
        panel.generate()

    def _on_generated(self, _result: object) -> None:
        if self.step == "generate":
            self.step = "idle"

    def _on_busy(self, busy: bool) -> None:
        if not busy and self.step == "idle":
            self.step = "shoot"
            QTimer.singleShot(600, self._shoot)  # a few plot ticks after the last event

    def _on_failed(self, error: TaskError) -> None:
        if self.screenshot and self.step not in ("done", "shoot"):
            self.errors.append(f"{error.task}: {error.code}: {error.message}")
            QTimer.singleShot(300, lambda: self._finish(self.errors[-1]))

    def _shoot(self) -> None:
        if self.extra is not None:  # the user's folder: show its longest name (elided, not widening)
            names = [e.path for e in self.window.browser.model.entries() if self.extra in e.path.parents]
            if names:
                self.window.browser.select_path(max(names, key=lambda p: len(p.name)))
            QTimer.singleShot(300, lambda: self._finish(None))
            return
        self._finish(None)

    def _grab(self):  # type: ignore[no-untyped-def]
        """Under a real X server the whole screen, the window manager's frame and whatever does not
        fit included; elsewhere (offscreen) the window."""
        screen = self.window.screen()
        if QGuiApplication.platformName() == "xcb" and screen is not None:
            return screen.grabWindow(0)
        return self.window.grab()

    def _finish(self, error: str | None) -> None:
        if self.exit_code is not None:
            return
        self.timeout.stop()
        ok = False
        if self.screenshot:
            ok = self._grab().save(self.screenshot)
            if not ok:
                error = error or f"could not write {self.screenshot}"
        if error:
            print(f"loadout --demo: {error}", file=sys.stderr)
        self.exit_code = 0 if error is None and ok else 1
        self.window.close()
        QApplication.instance().exit(self.exit_code)  # type: ignore[union-attr]
