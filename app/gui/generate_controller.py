"""Wires the Generate panel to the backend and the window: requests out, progress and pictures in,
the output folder remembered in the settings, errors shown in the message bar."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, QStandardPaths, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from app.backend.backend import Backend
from app.backend.hint_maps import HintMaps
from app.backend.messages import TaskError
from app.demo import with_demo_note
from app.gui.generate_panel import NO_MODEL, GeneratePanel
from app.gui.prompt_completion import completion_words
from core.archs.catalog import missing_parts
from core.detect.spec import NO_MODEL_DEFAULTS
from core.errors import LoadoutError
from core.generate.request import ImageSettings
from core.library import Entry
from core.session import ModelInfo, StackInfo

_KEY = "generate/output_folder"
_FIELDS = "generate/fields"


def default_output_folder() -> Path:
    pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
    return Path(pictures or Path.home()) / "Loadout"


class GenerateController(QObject):
    folder_changed = Signal(object)  # Path: the gallery lists the new folder

    def __init__(
        self,
        panel: GeneratePanel,
        backend: Backend,
        store: QSettings,
        show_error: Callable[[TaskError], None],
        output_folder: Path | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.panel, self.backend, self.store, self.show_error = panel, backend, store, show_error
        saved = store.value(_KEY)
        self.output_folder = output_folder or (Path(str(saved)) if saved else default_output_folder())
        panel.set_output_folder(self.output_folder)
        self._restore_fields()
        panel.generate_requested.connect(self.generate)
        panel.sweep_requested.connect(
            lambda settings, sweep: backend.generate(settings, self.output_folder, sweep)
        )
        backend.stack_changed.connect(
            lambda info: panel.set_loras(tuple((lo.id, lo.path.stem) for lo in info.loras))
        )
        backend.stack_changed.connect(lambda info: panel.control_picture.set_loras(control_loras(info)))
        panel.error.connect(self._panel_error)
        panel.output_folder_requested.connect(self.choose_output_folder)
        backend.generate_progress.connect(panel.on_progress)
        self.main_path: Path | None = None
        backend.generated.connect(lambda result: panel.on_result(with_demo_note(result, self.main_path)))
        backend.started.connect(lambda task: panel.on_started() if task == "generate" else None)
        backend.finished.connect(lambda task: panel.on_finished() if task == "generate" else None)
        backend.interrupted.connect(lambda task: panel.on_stopped() if task == "generate" else None)
        backend.models_changed.connect(self._models)
        self.maps = HintMaps(backend)  # the depth rows' previews, made on the worker
        panel.workflows.controlnets.set_map_maker(self.maps)
        panel.control_picture.pre.set_maker(self.maps)
        self.controlnet_files: dict[Path, bool] = {}  # the library's files: is it a ControlNet
        self.controlnet_family: dict[Path, str | None] = {}  # the family each ControlNet is for
        self._seen: set[Path] = set()  # listed by the running scan: the others are gone after it
        self.words: dict[Path, Entry] = {}  # the library's entries the prompt completion offers from
        backend.entries_found.connect(self._entries)
        backend.started.connect(lambda task: self._seen.clear() if task == "scan" else None)
        backend.scan_done.connect(lambda _problems: self._scan_done())

    def generate(self, settings: ImageSettings) -> None:
        self.save_fields()
        self.backend.generate(settings, self.output_folder)

    def save_fields(self) -> None:
        """The prompt, negative and settings, for the next launch (also saved when the window closes)."""
        self.store.setValue(_FIELDS, json.dumps(self.panel.fields()))

    def _restore_fields(self) -> None:
        saved = self.store.value(_FIELDS)
        try:
            fields = json.loads(str(saved)) if saved else None
        except ValueError:
            fields = None  # a damaged entry: the panel's defaults
        if isinstance(fields, dict):
            self.panel.restore_fields(fields)

    def _entries(self, entries: list[Entry]) -> None:
        """The library's ControlNets (listed or filled in) offered in the ControlNet rows; its
        embeddings and LoRA trigger words offered as the prompts are typed."""
        self.panel.model.add_entries(entries)
        for e in entries:
            self.words[e.path] = e
            self._seen.add(e.path)
            self.controlnet_files[e.path] = e.kind == "controlnet" and e.status == "ok"
            self.controlnet_family[e.path] = e.family
        self._offer()

    def _scan_done(self) -> None:
        """Files a rescan no longer lists (moved, deleted, a folder removed) are no longer offered."""
        self.panel.model.keep_only(self._seen)
        for path in set(self.words) - self._seen:
            del self.words[path]
        for path in set(self.controlnet_files) - self._seen:
            del self.controlnet_files[path]
            self.controlnet_family.pop(path, None)
        self._offer()

    def _offer(self) -> None:
        self.panel.set_completions(completion_words(self.words.values()))
        found = (p for p, yes in self.controlnet_files.items() if yes)
        now = tuple(sorted(found, key=lambda p: p.name.lower()))
        families = {p: self.controlnet_family.get(p) for p in now}
        nets = self.panel.workflows.controlnets
        if now != nets.choices or families != nets.families:
            nets.set_choices(now, families)

    def _panel_error(self, exc: LoadoutError) -> None:
        self.show_error(TaskError("generate", exc.code or "bad_argument", exc.message))

    def _models(self, models: tuple[ModelInfo, ...]) -> None:
        main = next((m for m in models if m.is_main), None)
        family = main.family if main is not None else None
        self.main_path = main.path if main is not None else None
        if family != self.panel.family:
            self.panel.set_family(family, main.defaults if main is not None else NO_MODEL_DEFAULTS)
        self.panel.references.set_limit(main.references if main is not None else 0)
        self.panel.control_picture.set_model(main is not None and main.control_picture)
        can = main is not None and any(c.role == "diffusion_model" for c in main.components)
        self.panel.set_available(can, NO_MODEL)
        self.panel.model.set_loaded(self.main_path)
        parts = {(c.role, c.family) for m in models for c in m.components}
        self.panel.model.set_missing(missing_parts(family, parts) if main is not None else ())
        if can and main is not None and main.name.startswith("loadout-demo"):
            self.panel.status.setText(
                "The demo's tiny models have random weights: they make noise-like pictures. "
                "Load a real checkpoint for real ones."
            )

    def choose_output_folder(self) -> None:
        parent = self.panel if isinstance(self.panel, QWidget) else None
        chosen = QFileDialog.getExistingDirectory(parent, "Save pictures in", str(self.output_folder))
        if chosen:
            self.set_output_folder(Path(chosen))

    def set_output_folder(self, folder: Path) -> None:
        self.output_folder = folder
        self.store.setValue(_KEY, str(folder))
        self.panel.set_output_folder(folder)
        self.folder_changed.emit(folder)


def control_loras(stack: StackInfo) -> tuple[str, ...]:
    """The names of the stack's FLUX.1 control LoRAs that are on with a strength: the model then
    reads a control picture (the engine's rule, ``core.generate.control_picture.has_control_lora``)."""
    return tuple(lo.path.stem for lo in stack.loras if lo.control and lo.enabled and lo.model_strength != 0)
