"""The model in use, at the top of the Generate panel, with a quick switch: a list of the library's
checkpoints and diffusion models (without opening the library) that loads the one chosen.

A thin Qt-side model over the backend's snapshots: it is told the library's loadable files
(:meth:`ModelPicker.set_entries`) and the loaded main model (:meth:`ModelPicker.set_loaded`), and
only emits :attr:`ModelPicker.load_requested`; the window decides what loading means.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QToolButton, QWidget

from app.gui.theme import set_icon
from core.library import Entry

#: what the picker offers: what can be generated from on its own
MAIN_KINDS = ("checkpoint", "diffusion_model")
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
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        label = QLabel("Model")
        label.setObjectName("muted")
        row.addWidget(label)
        row.addWidget(self.combo, 1)
        row.addWidget(self.library)
        self._fill()

    def add_entries(self, entries: list[Entry]) -> None:
        """Entries listed or filled in by a scan: the loadable ones are offered (others dropped)."""
        for e in entries:
            if e.kind in MAIN_KINDS and e.status == "ok":
                self.files[e.path] = f"{e.path.stem}  ·  {e.family or e.kind}"
            else:
                self.files.pop(e.path, None)
        self._fill()

    def keep_only(self, paths: set[Path]) -> None:
        """After a rescan: files no longer listed are no longer offered."""
        for path in set(self.files) - paths:
            del self.files[path]
        self._fill()

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

    def _chosen(self, index: int) -> None:
        data = self.combo.itemData(index)
        if data and Path(data) != self.loaded:
            self.load_requested.emit(Path(data))
