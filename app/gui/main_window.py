"""The main window: it wires the panels (docks, dock_layout.py; workspaces, workspaces.py) to the
backend and owns the actions. Everything long runs on the backend's worker thread; the window only
sends requests, shows the snapshots that come back and words errors through :mod:`app.gui.errors`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from PySide6.QtCore import QByteArray, QDir, QSettings, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QMainWindow,
    QMessageBox,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import EngineEvent, ModelInfo, StackInfo, TaskError
from app.backend.monitor import MemoryMonitor
from app.gui.actions import main_toolbar, make_action
from app.gui.browser import BrowserPanel
from app.gui.details import DetailsPanel, refusal
from app.gui.dock_layout import DockLayout, initial_size, keep_on_screen
from app.gui.errors import Friendly, describe, describe_exception
from app.gui.folder_watch import FolderWatch
from app.gui.folders import ModelFolders
from app.gui.generate_controller import GenerateController
from app.gui.generate_panel import GeneratePanel
from app.gui.last_session import LastSession
from app.gui.loaded_panel import LoadedModelsPanel
from app.gui.lora_panel import LoraStackPanel
from app.gui.memory_panel import MemoryPanel
from app.gui.menus import build_menus
from app.gui.merge_dialog import open_merge_dialog
from app.gui.outpaint_drag import connect_outpaint_drag
from app.gui.pictures import PictureHost, Pictures
from app.gui.placement_controls import PlacementControls
from app.gui.queue_install import QueueHost, install_queue_panel
from app.gui.settings import AppSettings, SettingsDialog
from app.gui.stack_model import StackModel
from app.gui.testrun_panel import TestRunPanel
from app.gui.theme import app_icon, apply_theme, refresh_icons
from app.gui.widgets import MessageBar, StatusLine
from app.gui.workspaces import Workspaces
from core.library import Entry

_HEADER, _VIEW = "library/header", "library/view"  # its columns; list or cards


class MainWindow(PlacementControls, QMainWindow):
    def __init__(
        self,
        backend: Backend,
        monitor: MemoryMonitor,
        store: QSettings,
        *,
        session_folders: tuple[str, ...] = (),
        include_own_folder: bool = True,
        output_folder: Path | None = None,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.monitor = monitor
        self.store = store
        self.settings = AppSettings.load(store)
        self.models: tuple[ModelInfo, ...] = ()
        self.stack = StackInfo(None)
        self._loading: list[Path] = []  # loads requested and not finished, in order
        # read once here, before the worker runs anything; later changes arrive as signals
        self.placement = backend.placement
        self.has_gpu = backend.placement.has_gpu
        self.setWindowTitle("Loadout")
        self.setWindowIcon(app_icon())
        self.confirm_quit: Callable[[str], bool] = self._ask_quit  # Quit while a queue job runs
        self._build_panels()
        self.model_folders = ModelFolders(lambda: self.settings.folders, backend.scan, self.browser.set_empty,
                                          session_folders, include_own_folder)  # fmt: skip
        if monitor.figures is not None:  # not a test's own monitor
            self._watch_placement()
        self._build_actions()
        self._connect_backend()
        self.generate = GenerateController(
            self.generate_panel, backend, store, self.show_error, output_folder, parent=self
        )
        self.generate.folder_changed.connect(self.gallery.set_folder)
        self.gallery.set_folder(self.generate.output_folder)
        self.queue_panel = install_queue_panel(self.layout_, backend, store, self.pictures, QueueHost(
            self.generate_panel.settings, lambda: self.generate.output_folder,
            lambda: self.settings.ray_address, self.show_message,
        ))  # fmt: skip
        self.workspaces = Workspaces(self, self.pages, self.picture, self.docks)
        self.toolbar.insertWidget(self.toolbar_spacer, self.workspaces.tabs)
        self.generate_panel.model.library_requested.connect(lambda: self.workspaces.show("library"))
        self.generate_panel.model.load_requested.connect(self.load_path)
        self.generate_panel.stop_requested.connect(self.interrupt)
        self.last_session = LastSession(backend, store, self._offer, self.load_path, parent=self)
        lib, output = self.browser.model.entries, self.generate.choose_output_folder
        file = (self.add_folder_action, self.rescan_action, ("Output folder…", output),
                ("Merge models…", lambda: open_merge_dialog(self, self.backend, lib())), None,
                self.settings_action, None, self.quit_action)  # fmt: skip
        build_menus(self, self.menuBar(), file, self.workspaces.actions, self.layout_, self.picture.view)
        self.browser.restore_header(store.value(_HEADER), store.value(_VIEW))
        self.browser.view_changed.connect(lambda mode: store.setValue(_VIEW, mode))
        self.folder_watch = FolderWatch(self.backend, self.browser.model.entries, self.rescan, parent=self)
        self._arrange_on_show = not self.layout_.restore(store)  # a first run: the default layout
        if self._arrange_on_show:
            self.resize(initial_size(self))
        self.apply_settings(self.settings, initial=True)

    # -- building --------------------------------------------------------------------------------
    def _build_panels(self) -> None:
        self.message = MessageBar()
        self.browser = BrowserPanel(self.backend)
        self.details = DetailsPanel(self.monitor)
        self.details.duplicate_of = self.browser.model.duplicate  # the other copies of a file's data
        self.generate_panel = GeneratePanel()
        self.pictures = Pictures(self, PictureHost(
            say=self.show_message, panel=self.generate_panel,
            show_panel=lambda: self.layout_.bring("generate"),
            loaded=self._main_path, stack=lambda: self.stack.loras, library=self.browser.model.entries,
            change_stack=self.backend.change_stack, load=self.load_path,
            raise_picture=lambda: self.centralWidget().raise_(),
        ))  # fmt: skip
        self.picture = self.pictures.viewer
        self.gallery = self.pictures.gallery
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(4, 4, 4, 0)
        layout.setSpacing(4)
        layout.addWidget(self.message)
        self.pages = QStackedWidget()  # the Create workspace's picture, or another workspace
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(central)

        self.stack_model = StackModel(self.backend, self)  # the stack's snapshots and edits
        self.lora_panel = LoraStackPanel(self.stack_model, self.settings.lora_min, self.settings.lora_max)
        self.loaded_panel = LoadedModelsPanel(self.backend, self.placement)
        self.memory_panel = MemoryPanel(self.monitor, self.placement)
        self.testrun_panel = TestRunPanel(self.backend, self.placement.device)
        self.layout_ = DockLayout(self, {
            "library": self.browser, "details": self.details, "generate": self.generate_panel,
            "lora": self.lora_panel, "loaded": self.loaded_panel, "gallery": self.gallery,
            "memory": self.memory_panel, "testrun": self.testrun_panel,
        })  # fmt: skip
        self.docks = self.layout_.docks
        self.outpaint_drag = connect_outpaint_drag(self.picture.view, self.generate_panel.workflows)
        self.generate_panel.preview_ready.connect(self.pictures.on_preview)
        self.generate_panel.pictures_ready.connect(self.pictures.on_result)
        self.status = StatusLine(self.statusBar(), self._device_text())
        self.task_label, self.task_progress, self.device_label = (self.status.label, self.status.progress,
                                                                  self.status.device)  # fmt: skip

        self.browser.entry_selected.connect(self.details.show_entry)
        self.browser.entry_activated.connect(self.load_entry)
        self.browser.demo_requested.connect(self.backend.prepare_demo)
        self.browser.folder_requested.connect(self.add_folder)
        self.details.load_requested.connect(self.load_entry)
        self.details.add_lora_requested.connect(lambda e: self.add_lora(e.path))
        self.lora_panel.files_dropped.connect(lambda paths: [self.add_lora(p) for p in paths])
        self.lora_panel.range_changed.connect(self._range_changed)

    def _build_actions(self) -> None:
        act = partial(make_action, self)
        self.add_folder_action = act(
            "folder-plus", "Add folder", "Ctrl+O", self.add_folder_dialog, "Add a model folder"
        )
        self.rescan_action = act("refresh", "Rescan", "F5", self.rescan, "Read the model folders again")
        self.load_action = act("load", "Load", "Ctrl+L", self.load_selected, "Load the selected model")
        self.place_action = act(
            "load", "Load to GPU", "Ctrl+G", self.place_selected, "Place the selected loaded model on the GPU"
        )
        self.offload_action = act(
            "down", "Offload", "Ctrl+Shift+G", self.offload_selected, "Move the selected loaded model to RAM"
        )
        self.search_action = act(
            "search", "Search", "Ctrl+F", self.browser.focus_search, "Search the library"
        )
        for action in (self.place_action, self.offload_action):
            action.setEnabled(self.placement.active)
        self.interrupt_action = act("stop", "Stop", "Esc", self.interrupt, "Stop the running task")
        self.interrupt_action.setEnabled(False)
        self.settings_action = act("settings", "Settings", "Ctrl+,", self.open_settings, "Settings")
        self.quit_action = act("remove", "Quit", "Ctrl+Q", self.close, "Quit Loadout")
        self.quit_action.setMenuRole(QAction.MenuRole.QuitRole)
        left = (self.add_folder_action, self.rescan_action, self.load_action, self.place_action)
        right = (self.settings_action,)
        self.toolbar = main_toolbar((*left, self.interrupt_action), right, self.interrupt_action)
        self.toolbar_spacer = self.toolbar.actions()[len(left) + 1]  # the workspaces go before it
        self.addToolBar(self.toolbar)

    def _connect_backend(self) -> None:
        w = self.backend
        self.backend.busy_changed.connect(self._on_busy)
        w.started.connect(self._on_started)
        w.progress.connect(self.status.progress_)
        w.failed.connect(self.show_error)
        w.interrupted.connect(self._on_interrupted)
        w.event.connect(self._on_event)
        w.models_changed.connect(self._on_models)
        w.stack_changed.connect(self._on_stack)
        w.model_loaded.connect(self._on_loaded)
        w.demo_ready.connect(self.model_folders.add_session)
        w.placement_changed.connect(self._on_placement)
        w.memory_changed.connect(self.monitor.update)
        w.finished.connect(lambda task: task == "load" and self._loading and self._loading.pop(0))
        w.run_done.connect(lambda r: self.task_label.setText(f"Test run: {r.seconds_per_step:.3f} s/step"))
        w.scan_done.connect(lambda problems: self.task_label.setText("Library up to date"))

    # -- folders and scanning --------------------------------------------------------------------
    def rescan(self) -> None:
        self.model_folders.rescan()

    def add_folder_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Add a model folder (ComfyUI, A1111 or any folder)", QDir.homePath()
        )
        if folder:
            self.add_folder(folder)

    def add_folder(self, folder: str) -> None:
        self.apply_settings(self.settings.with_folder(str(folder)))

    # -- settings --------------------------------------------------------------------------------
    def open_settings(self) -> None:
        dialog = SettingsDialog(self.settings, self, has_gpu=self.has_gpu)
        if dialog.exec():
            self.apply_settings(dialog.settings())

    def apply_settings(self, settings: AppSettings, *, initial: bool = False) -> None:
        try:
            settings.memory_settings()
        except Exception as exc:
            self.show_message(describe_exception("settings", exc))
            return
        changed_folders = settings.folders != self.settings.folders
        theme_changed = settings.dark_theme != self.settings.dark_theme
        memory_changed = settings.placement_config() != self.settings.placement_config()
        self.settings = settings
        settings.save(self.store)
        app = QApplication.instance()
        if theme_changed and isinstance(app, QApplication):
            apply_theme(app, settings.dark_theme)
            refresh_icons(self)
            self.memory_panel.plot.apply_theme()
            self.details.show_entry(self.details.entry)
        self.backend.set_dtype_overrides(settings.dtype_overrides)
        self.details.fit.reserve = self._reserve()
        self.details.fit.refresh()
        if memory_changed and not initial:
            self.backend.configure_memory(settings.placement_config())
        if initial or changed_folders:
            self.rescan()

    def _range_changed(self, lo: float, hi: float) -> None:
        self.settings = replace(self.settings, lora_min=lo, lora_max=hi)
        self.settings.save(self.store)

    # -- loading and LoRAs -----------------------------------------------------------------------
    def load_selected(self) -> None:
        entry = self.browser.current_entry()
        if entry is None:
            self.show_message(Friendly("Nothing selected", "Select a model in the browser first.", "info"))
            return
        self.load_entry(entry)

    def load_entry(self, entry: Entry) -> None:
        refused = refusal(entry)
        if isinstance(refused, Friendly):
            self.show_message(refused)
        elif refused is not None:
            self.show_error(refused)
        elif entry.kind == "lora":
            self.add_lora(entry.path)
        elif entry.path not in self._loading:  # a second double-click while it loads does nothing
            self._loading.append(entry.path)
            self.backend.load(entry.path, entry.kind)

    def _offer(self, text: str, accept: Callable[[], None]) -> None:
        self.show_message(Friendly("Welcome back", text, "info"), ("Load again", accept))

    def load_path(self, path: Path) -> None:
        """Load a library file by its path (the model picker, the last session's model)."""
        entry = next((e for e in self.browser.model.entries() if e.path == path), None)
        if entry is None:
            msg = Friendly("Not in the library", f"{path} is no longer listed; rescan (F5).", "info")
            return self.show_message(msg)
        self.load_entry(entry)

    def add_lora(self, path: Path | str, *, force: bool = False) -> None:
        if self.stack.model_family is None:
            self.show_error(TaskError("lora", "no_model", "A LoRA needs a loaded model to patch."))
            return
        self.backend.add_lora(path, 1.0, 1.0, force)

    # -- backend signals -------------------------------------------------------------------------
    def _on_busy(self, busy: bool) -> None:
        self.interrupt_action.setEnabled(busy)
        self.testrun_panel.set_model_loaded(self.testrun_panel.model_loaded)
        self.status.busy(busy)

    def _on_started(self, task: str) -> None:
        self.status.started(task)
        if self.message.isVisible() and self.message.title == "Stopped":
            self.message.hide()  # it belonged to the run before this one

    def _on_interrupted(self, task: str) -> None:
        self.show_error(TaskError(task, "interrupted", ""))  # type: ignore[arg-type]

    def _on_event(self, event: EngineEvent) -> None:
        self.memory_panel.add_event(event)

    def _on_loaded(self, model: ModelInfo) -> None:
        self.task_label.setText(f"Loaded {model.name} in {model.load_seconds:.2f} s")
        self.pictures.on_model_loaded()  # a picture's LoRAs waiting for its model

    def _main_path(self) -> Path | None:
        return next((m.path for m in self.models if m.is_main), None)

    def _on_models(self, models: tuple[ModelInfo, ...]) -> None:
        self.models = tuple(models)
        main = next((m for m in self.models if m.is_main), None)
        # Qt adds the application's name ("… — Loadout") to a title that is not the name itself
        self.setWindowTitle(main.name if main else "Loadout")
        self.testrun_panel.set_model_loaded(main is not None)
        self.details.fit.refresh()

    def _on_stack(self, info: StackInfo) -> None:
        self.stack = info
        self.details.set_model_loaded(info.model_family is not None)

    def show_error(self, error: TaskError) -> None:
        friendly = describe(error)
        action = None
        if error.code == "lora_family_mismatch" and error.path is not None:
            path = error.path
            action = ("Add anyway", lambda: self.add_lora(path, force=True))
        self.show_message(friendly, action)

    def show_message(self, message: Friendly, action: tuple[str, object] | None = None) -> None:
        self.message.show_message(message, action)  # type: ignore[arg-type]
        self.task_label.setText(f"{message.title}: {message.text}"[:160])

    def interrupt(self) -> None:
        """Esc / Stop: set the backend's flag directly (it takes effect while the worker is busy)."""
        self.backend.interrupt()
        self.task_label.setText("Stopping…")

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # a picture dragged over the window
        self.pictures.drag_enter(event)

    def dropEvent(self, event: QDropEvent) -> None:  # ... and dropped: its settings to Generate
        self.pictures.drop(event)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._arrange_on_show:  # sized for the window as it is shown
            self._arrange_on_show = False
            self.layout_.arrange()
        QTimer.singleShot(0, lambda: keep_on_screen(self))  # once the frame is known

    def _ask_quit(self, text: str) -> bool:
        return QMessageBox.question(self, "Quit Loadout?", text) == QMessageBox.StandardButton.Yes

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.queue_panel.may_quit(self.confirm_quit):
            event.ignore()
            return
        self.queue_panel.stop()
        self.workspaces.show("create")  # the docks' own layout is what is remembered
        self.generate.save_fields()
        self.store.setValue(_HEADER, QByteArray(self.browser.header_state()))
        self.layout_.save(self.store)
        self.memory_panel.plot.timer.stop()
        self.backend.shutdown()
        super().closeEvent(event)
