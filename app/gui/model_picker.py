"""The model in use, at the top of the Generate panel, with a quick switch: a list of the library's
checkpoints and diffusion models (without opening the library) that loads the one chosen. Under
it, when the loaded model is a diffusion model alone, what it still needs (its text encoders and
VAE, core.detect.catalog.missing_parts) and the library's files for them, loaded with one click.

A thin Qt-side model over the backend's snapshots: it is told the library's loadable files
(:meth:`ModelPicker.set_entries`) and the loaded main model (:meth:`ModelPicker.set_loaded`), and
only emits :attr:`ModelPicker.load_requested`; the window decides what loading means.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QToolButton, QVBoxLayout, QWidget

from app.gui.theme import set_icon
from core.library import Entry

#: what the picker offers: what can be generated from on its own
MAIN_KINDS = ("checkpoint", "diffusion_model")
#: what a diffusion model alone still needs: offered from the library
PART_KINDS = ("text_encoder", "vae")
ROLE_WORDS = {"text_encoder": "a text encoder", "vae": "a VAE"}
_NONE = "No model loaded: choose one"


class ModelPicker(QWidget):
    load_requested = Signal(object)  # Path
    library_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.files: dict[Path, str] = {}  # path -> "name · family"
        self.loaded: Path | None = None
        self.combo = QComboBox()
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(12)
        self.combo.setToolTip("The model in use; choose another to load it")
        self.combo.activated.connect(self._chosen)
        self.library = QToolButton(autoRaise=True, toolTip="Open the library (Alt+2)")
        set_icon(self.library, "folder")
        self.library.clicked.connect(self.library_requested.emit)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        label = QLabel("Model")
        label.setObjectName("muted")
        row.addWidget(label)
        row.addWidget(self.combo, 1)
        row.addWidget(self.library)
        self.parts: dict[tuple[str, str], list[Path]] = {}  # (role, family) -> the library's files
        self.missing: tuple[tuple[str, str], ...] = ()
        self.needs = QLabel()  # "Also needs its text encoder (qwen3-4b) and a VAE (vae-flux)."
        self.needs.setObjectName("warning")
        self.needs.setWordWrap(True)
        self.load_parts = QPushButton()
        self.load_parts.clicked.connect(self._load_parts)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(4)
        column.addLayout(row)
        column.addWidget(self.needs)
        column.addWidget(self.load_parts)
        self._fill()
        self._show_needs()

    def add_entries(self, entries: list[Entry]) -> None:
        """Entries listed or filled in by a scan: the loadable ones are offered (others dropped)."""
        for e in entries:
            if e.kind in MAIN_KINDS and e.status == "ok":
                self.files[e.path] = f"{e.path.stem}  ·  {e.family or e.kind}"
            else:
                self.files.pop(e.path, None)
            for paths in self.parts.values():
                if e.path in paths:
                    paths.remove(e.path)
            if e.kind in PART_KINDS and e.status == "ok" and e.family:
                self.parts.setdefault((e.kind, e.family), []).append(e.path)
        self._fill()
        self._show_needs()

    def keep_only(self, paths: set[Path]) -> None:
        """After a rescan: files no longer listed are no longer offered."""
        for path in set(self.files) - paths:
            del self.files[path]
        for files in self.parts.values():
            files[:] = [p for p in files if p in paths]
        self._fill()
        self._show_needs()

    def set_loaded(self, path: Path | None) -> None:
        self.loaded = path
        self._fill()

    def current_path(self) -> Path | None:
        data = self.combo.currentData()
        return Path(data) if data else None

    def _fill(self) -> None:
        self.combo.blockSignals(True)
        self.combo.clear()
        if self.loaded is None:
            self.combo.addItem(_NONE if self.files else "No model in the library yet: add a folder", "")
        paths = sorted(self.files, key=lambda p: p.name.lower())
        if self.loaded is not None and self.loaded not in self.files:
            paths.insert(0, self.loaded)
        for path in paths:
            self.combo.addItem(self.files.get(path, path.stem), str(path))
            self.combo.setItemData(self.combo.count() - 1, str(path), Qt.ItemDataRole.ToolTipRole)
        if self.loaded is not None:
            self.combo.setCurrentIndex(max(0, self.combo.findData(str(self.loaded))))
        self.combo.blockSignals(False)

    def set_missing(self, missing: tuple[tuple[str, str], ...]) -> None:
        """What the loaded model still needs to generate, as (role, family) pairs."""
        self.missing = tuple(missing)
        self._show_needs()

    def part_files(self) -> list[Path]:
        """The library's file for each missing part that it has (the first by name)."""
        found = (sorted(self.parts.get(part, []), key=lambda p: p.name.lower()) for part in self.missing)
        return [files[0] for files in found if files]

    def _show_needs(self) -> None:
        words = [
            f"{'a VAE' if role == 'vae' else 'a text encoder'} ({family})" for role, family in self.missing
        ]
        absent = [family for role, family in self.missing if not self.parts.get((role, family))]
        text = f"It also needs {' and '.join(words)} to generate." if words else ""
        if absent:
            text += f" Not in your library: {', '.join(absent)}; add the folder that holds it (Ctrl+O)."
        self.needs.setText(text)
        self.needs.setVisible(bool(words))
        files = self.part_files()
        self.load_parts.setText(f"Load {' + '.join(p.stem for p in files)}")
        self.load_parts.setToolTip("\n".join(str(p) for p in files))
        self.load_parts.setVisible(bool(files))

    def _load_parts(self) -> None:
        for path in self.part_files():
            self.load_requested.emit(path)

    def _chosen(self, index: int) -> None:
        data = self.combo.itemData(index)
        if data and Path(data) != self.loaded:
            self.load_requested.emit(Path(data))
