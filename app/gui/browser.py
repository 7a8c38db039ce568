"""The model browser panel: search, group/filter/sort controls, the tree and the scan progress.

A view over the backend's library: it listens to the worker's ``entries_found`` / ``progress`` /
``scan_done`` signals and never reads files itself. Selecting a row emits ``entry_selected``;
double-clicking (or Enter) emits ``entry_activated`` (the window loads it).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import TaskProgress
from app.gui.library_model import KIND_TITLES, LibraryTreeModel
from app.gui.theme import icon, kind_text, set_icon
from core.library import Entry
from core.library.query import KIND_ORDER

SORTS = (("Name", "name"), ("Date", "date"), ("Size", "size"), ("Family", "family"))


class BrowserPanel(QWidget):
    entry_selected = Signal(object)  # Entry | None
    entry_activated = Signal(object)  # Entry
    demo_requested = Signal()

    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.model = LibraryTreeModel(self)
        self._selected_path: str | None = None
        self._seen: set[str] = set()
        self._build()
        w = backend
        w.entries_found.connect(self.add_entries)
        w.progress.connect(self._on_progress)
        w.scan_done.connect(self._on_scan_done)
        w.started.connect(self._on_started)
        w.interrupted.connect(self._on_scan_stopped)
        self.model.rebuilt.connect(self._after_rebuild)

    def _build(self) -> None:
        self.search = QLineEdit(placeholderText="Search names, families, trigger words  (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        set_icon(self.search.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition), "search")
        self.search.textChanged.connect(lambda t: self.model.set_view(search_text=t))
        self.grouping = QComboBox()
        self.grouping.addItem("By folder", "folder")
        self.grouping.addItem("By kind", "kind")
        self.grouping.currentIndexChanged.connect(
            lambda: self.model.set_view(grouping=self.grouping.currentData())
        )
        self.kind_filter = QComboBox()
        self.kind_filter.addItem("All kinds", None)
        for kind in KIND_ORDER:
            self.kind_filter.addItem(KIND_TITLES.get(kind, kind_text(kind)), kind)
        self.kind_filter.currentIndexChanged.connect(
            lambda: self.model.set_view(kind=self.kind_filter.currentData())
        )
        self.family_filter = QComboBox()
        self.family_filter.addItem("All families", None)
        self.family_filter.setMinimumContentsLength(10)
        self.family_filter.currentIndexChanged.connect(
            lambda: self.model.set_view(family=self.family_filter.currentData())
        )
        self.sort = QComboBox()
        for label, key in SORTS:
            self.sort.addItem(f"Sort: {label}", key)
        self.sort.currentIndexChanged.connect(lambda: self.model.set_view(sort_key=self.sort.currentData()))
        self.descending = QToolButton(checkable=True, toolTip="Reverse the order")
        set_icon(self.descending, "down")
        self.descending.toggled.connect(lambda on: self.model.set_view(descending=on))

        for combo in (self.grouping, self.kind_filter, self.family_filter, self.sort):  # a narrow dock
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(6)
        controls = QHBoxLayout()
        controls.setSpacing(6)
        for widget in (self.grouping, self.kind_filter, self.family_filter, self.sort, self.descending):
            controls.addWidget(widget)
        controls.addStretch(1)

        self.tree = QTreeView()
        self.tree.setModel(self.model)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setDragEnabled(True)
        self.tree.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        self.tree.setAnimated(False)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col, width in ((1, 92), (2, 118), (3, 72), (4, 64)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            self.tree.setColumnWidth(col, width)
        self.tree.selectionModel().currentChanged.connect(self._on_current)
        self.tree.doubleClicked.connect(self._on_activated)  # (not ``activated`` too: both fire)
        for key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):  # Enter loads, like a double-click
            enter = QShortcut(QKeySequence(key), self.tree)
            enter.setContext(Qt.ShortcutContext.WidgetShortcut)
            enter.activated.connect(lambda: self._on_activated(self.tree.currentIndex()))

        self.empty = QWidget()
        empty_layout = QVBoxLayout(self.empty)
        hint = QLabel(
            "No models found yet.\nAdd your ComfyUI or A1111 folder (Ctrl+O), or try the demo library."
        )
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint.setObjectName("muted")
        demo = QPushButton("Open the demo library")
        demo.setObjectName("primary")
        demo.clicked.connect(self.demo_requested)
        empty_layout.addStretch(1)
        empty_layout.addWidget(hint)
        empty_layout.addWidget(demo, 0, Qt.AlignmentFlag.AlignHCenter)
        empty_layout.addStretch(2)
        self.empty.hide()

        self.progress = QProgressBar()
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.summary = QLabel("")
        self.summary.setObjectName("muted")
        bottom = QHBoxLayout()
        bottom.addWidget(self.summary, 1)
        bottom.addWidget(self.progress, 1)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 6)
        layout.setSpacing(6)
        layout.addWidget(self.search)
        layout.addLayout(controls)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.empty, 1)
        layout.addLayout(bottom)

    # -- feeding ---------------------------------------------------------------------------------
    def set_empty(self, empty: bool) -> None:
        self.empty.setVisible(empty)
        self.tree.setVisible(not empty)

    def add_entries(self, entries: list[Entry]) -> None:
        self._seen.update(str(e.path) for e in entries)
        self.model.add_entries(entries)
        self._refresh_summary()
        if self._selected_path is not None and any(str(e.path) == self._selected_path for e in entries):
            self.entry_selected.emit(self.current_entry())

    def _on_started(self, task: str) -> None:
        if task == "scan":
            self._seen = set()
            self.progress.setRange(0, 0)
            self.progress.show()

    def _on_progress(self, p: TaskProgress) -> None:
        if p.task != "scan":
            return
        if p.total <= 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, p.total)
            self.progress.setValue(p.done)
        self.summary.setText(p.text)

    def _on_scan_done(self, problems: list[str]) -> None:
        self.model.remove_missing(self._seen)
        self.set_empty(not self.model.entries())
        self.progress.hide()
        self._refresh_summary(problems)
        self._update_families()

    def _on_scan_stopped(self, task: str) -> None:
        if task == "scan":
            self.progress.hide()
            self._refresh_summary()
            self.summary.setText(self.summary.text() + " · scan stopped")

    def _refresh_summary(self, problems: list[str] | None = None) -> None:
        entries = self.model.entries()
        errors = sum(e.status == "error" for e in entries)
        pending = sum(e.status == "pending" for e in entries)
        parts = [f"{len(entries)} files"]
        if self.model.shown_count() != len(entries):
            parts.append(f"{self.model.shown_count()} shown")
        if pending:
            parts.append(f"{pending} to read")
        if errors:
            parts.append(f"{errors} unreadable")
        if problems:
            parts.append(f"{len(problems)} folder problem(s)")
            self.summary.setToolTip("\n".join(problems))
        if not self.progress.isVisible():
            self.summary.setText(" · ".join(parts))
        self._update_families()

    def _update_families(self) -> None:
        current = self.family_filter.currentData()
        known = [self.family_filter.itemData(i) for i in range(1, self.family_filter.count())]
        families = self.model.families()
        if families == known:
            return
        self.family_filter.blockSignals(True)
        self.family_filter.clear()
        self.family_filter.addItem("All families", None)
        for fam in families:
            self.family_filter.addItem(fam, fam)
        self.family_filter.setCurrentIndex(max(0, self.family_filter.findData(current)))
        self.family_filter.blockSignals(False)

    # -- selection -------------------------------------------------------------------------------
    def current_entry(self) -> Entry | None:
        return self.model.entry(self.tree.currentIndex())

    def select_path(self, path: Path | str) -> bool:
        index = self.model.index_of(str(path))
        if not index.isValid():
            return False
        self.tree.setCurrentIndex(index)
        self.tree.selectionModel().select(
            index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
        )
        self.tree.scrollTo(index)
        return True

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        entry = self.model.entry(current)
        self._selected_path = str(entry.path) if entry is not None else None
        self.entry_selected.emit(entry)

    def _on_activated(self, index: QModelIndex) -> None:
        entry = self.model.entry(index)
        if entry is not None:
            self.entry_activated.emit(entry)

    def _after_rebuild(self) -> None:
        self.tree.expandAll()
        if self._selected_path is not None:
            self.tree.selectionModel().blockSignals(True)
            found = self.select_path(self._selected_path)
            self.tree.selectionModel().blockSignals(False)
            if not found:
                self._selected_path = None
                self.entry_selected.emit(None)
        self._refresh_summary()
