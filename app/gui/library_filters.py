"""The library's filters, in two rows that fit a narrow dock: kind, family and "fits the loaded
model" above; grouping, sort order and "duplicates only" below. Also what the library shows
before any model is found (with the installs found in the usual places)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.library_model import KIND_TITLES, LibraryTreeModel
from app.gui.theme import kind_text, set_icon
from core.library.query import KIND_ORDER

SORTS = (
    ("Name", "name"),
    ("Date", "date"),
    ("Size", "size"),
    ("Family", "family"),
    ("Last used", "last_used"),
    ("Kind", "kind"),
)


class LibraryFilters(QWidget):
    def __init__(self, model: LibraryTreeModel, apply_fits: Callable[[bool], None]) -> None:
        super().__init__()
        view = model.set_view
        self.grouping = QComboBox()
        self.grouping.addItem("By folder", "folder")
        self.grouping.addItem("By kind", "kind")
        self.grouping.currentIndexChanged.connect(lambda: view(grouping=self.grouping.currentData()))
        self.kind_filter = QComboBox()
        self.kind_filter.addItem("All kinds", None)
        for kind in KIND_ORDER:
            self.kind_filter.addItem(KIND_TITLES.get(kind, kind_text(kind)), kind)
        self.kind_filter.currentIndexChanged.connect(lambda: view(kind=self.kind_filter.currentData()))
        self.family_filter = QComboBox()
        self.family_filter.addItem("All families", None)
        self.family_filter.currentIndexChanged.connect(lambda: view(family=self.family_filter.currentData()))
        self.sort = QComboBox()
        for label, key in SORTS:
            self.sort.addItem(f"Sort: {label}", key)
        self.sort.currentIndexChanged.connect(lambda: view(sort_key=self.sort.currentData()))
        self.descending = QToolButton(checkable=True, toolTip="Reverse the order")
        set_icon(self.descending, "down")
        self.descending.toggled.connect(lambda on: view(descending=on))
        for combo in (self.grouping, self.kind_filter, self.family_filter, self.sort):  # a narrow dock
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(5)
        self.fits = QCheckBox("Fits model")  # "Fits sd1" once a model is loaded: short for narrow docks
        self.fits.setEnabled(False)
        self.fits.setToolTip("Load a model to list only the LoRAs made for its family")
        self.fits.toggled.connect(apply_fits)
        self.only_duplicates = QCheckBox("Duplicates")
        self.only_duplicates.setToolTip(
            "Only files whose data is also under another name or folder (×: same SHA-256; "
            "?: same size, not hashed yet)"
        )
        self.only_duplicates.toggled.connect(lambda on: view(only_duplicates=on))
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(6)
        grid.addWidget(self.kind_filter, 0, 0)
        grid.addWidget(self.family_filter, 0, 1)
        grid.addWidget(self.fits, 0, 2)
        grid.addWidget(self.grouping, 1, 0)
        order = QHBoxLayout()
        order.setSpacing(2)
        order.addWidget(self.sort, 1)
        order.addWidget(self.descending)
        grid.addLayout(order, 1, 1)
        grid.addWidget(self.only_duplicates, 1, 2)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)

    def set_families(self, families: list[str]) -> None:
        """The families the library holds, in the family filter (the chosen one kept)."""
        combo = self.family_filter
        current = combo.currentData()
        if families == [combo.itemData(i) for i in range(1, combo.count())]:
            return
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("All families", None)
        for fam in families:
            combo.addItem(fam, fam)
        combo.setCurrentIndex(max(0, combo.findData(current)))
        combo.blockSignals(False)


class EmptyLibrary(QWidget):
    """What shows instead of the tree before any model is found: what to do, an install found in
    the usual places (one click adds it) and the demo."""

    def __init__(self, open_demo: Callable[[], None], add_folder: Callable[[str], None]) -> None:
        super().__init__()
        self._add_folder = add_folder
        layout = QVBoxLayout(self)
        self.hint = QLabel()
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)  # a narrow dock wraps it instead of cutting it
        self.found = QVBoxLayout()
        self.demo = QPushButton("Open the demo library")
        self.demo.setObjectName("primary")
        self.demo.clicked.connect(open_demo)
        layout.addStretch(1)
        layout.addWidget(self.hint)
        layout.addLayout(self.found)
        layout.addWidget(self.demo, 0, Qt.AlignmentFlag.AlignHCenter)
        layout.addStretch(2)
        self.buttons: list[QPushButton] = []
        self.offer(())

    def offer(self, installs: Sequence[Path]) -> None:
        """A button per install found ("Add ~/ComfyUI"), the first one the primary action."""
        for button in self.buttons:
            button.deleteLater()
        self.buttons = []
        home = Path.home()
        for path in installs:
            shown = f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)
            button = QPushButton(f"Add {shown}")
            button.setToolTip(f"List the models of {path}")
            button.clicked.connect(lambda _=False, p=str(path): self._add_folder(p))
            self.found.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
            self.buttons.append(button)
        if self.buttons:
            self.buttons[0].setObjectName("primary")
        self.demo.setObjectName("" if self.buttons else "primary")
        self.demo.style().unpolish(self.demo)
        self.demo.style().polish(self.demo)
        found = "Found on this computer: add it with one click, or another folder (Ctrl+O)."
        none = "Add your ComfyUI or A1111 folder (Ctrl+O), or try the demo library."
        self.hint.setText(f"No models found yet.\n{found if self.buttons else none}")
