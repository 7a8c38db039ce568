"""The model browser panel: search, group/filter/sort controls, the tree and the scan progress.

A view over the backend's library: it listens to the worker's ``entries_found`` / ``progress`` /
``scan_done`` signals and never reads files itself. Selecting a row emits ``entry_selected``;
double-clicking (or Enter) emits ``entry_activated`` (the window loads it). "Fits the loaded
model" (on by default once a model is loaded) hides LoRAs made for other model families; the
footer says how much disk the library takes (per folder and kind in its tooltip), what duplicates
waste, and how far the background hash pass is (with a button to stop it).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QItemSelectionModel, QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import TaskProgress
from app.gui.library_columns import fit_columns
from app.gui.library_model import KIND_TITLES, LibraryTreeModel
from app.gui.library_summary import summary_parts, usage_text
from app.gui.theme import icon, kind_text, set_icon
from core.library import Entry
from core.library.hasher import HashProgress
from core.library.query import KIND_ORDER
from core.session import ModelInfo

SORTS = (
    ("Name", "name"),
    ("Date", "date"),
    ("Size", "size"),
    ("Family", "family"),
    ("Last used", "last_used"),
    ("Kind", "kind"),
)


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
        self._problems: list[str] = []
        self.loaded_family: str | None = None
        self._build()
        w = backend
        w.models_changed.connect(self._on_models)
        w.hash_progress.connect(self._on_hash_progress)
        w.entries_found.connect(self.add_entries)
        w.progress.connect(self._on_progress)
        w.scan_done.connect(self._on_scan_done)
        w.started.connect(self._on_started)
        w.interrupted.connect(self._on_scan_stopped)
        self.model.rebuilt.connect(self._after_rebuild)

    def _build(self) -> None:
        self._build_search()
        controls = self._build_toolbar()
        filters = self._build_filters()
        self._build_tree()
        self._build_empty()
        bottom = self._build_status()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 6)
        layout.setSpacing(6)
        layout.addWidget(self.search)
        layout.addLayout(controls)
        layout.addLayout(filters)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.empty, 1)
        layout.addLayout(bottom)

    def _build_search(self) -> None:
        """The search field (names, families, trigger words)."""
        self.search = QLineEdit(placeholderText="Search names, families, trigger words  (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        set_icon(self.search.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition), "search")
        self.search.textChanged.connect(lambda t: self.model.set_view(search_text=t))

    def _build_toolbar(self) -> QHBoxLayout:
        """Grouping, kind and family filters, sort order."""
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
        return controls

    def _build_filters(self) -> QHBoxLayout:
        """The check boxes: fits the loaded model, duplicates only."""
        self.fits = QCheckBox("Fits the loaded model")
        self.fits.setEnabled(False)
        self.fits.setToolTip("Load a model to list only the LoRAs made for its family")
        self.fits.toggled.connect(self._apply_fits)
        self.only_duplicates = QCheckBox("Duplicates")
        self.only_duplicates.setToolTip(
            "Only files whose data is also under another name or folder (×: same SHA-256; "
            "?: same size, not hashed yet)"
        )
        self.only_duplicates.toggled.connect(lambda on: self.model.set_view(only_duplicates=on))
        filters = QHBoxLayout()
        filters.setSpacing(12)
        filters.addWidget(self.fits)
        filters.addWidget(self.only_duplicates)
        filters.addStretch(1)
        return filters

    def _build_tree(self) -> None:
        """The tree of files: columns, drag out, Enter or a double-click loads."""
        self.tree = QTreeView()
        self.tree.setModel(self.model)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree.setDragEnabled(True)
        self.tree.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)
        self.tree.setAnimated(False)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # keeps the extension in sight
        header = self.tree.header()
        header.setStretchLastSection(False)
        # the columns follow the tree's width (library_columns.fit_columns)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        for col, width in ((1, 92), (2, 112), (3, 72), (4, 56), (5, 58), (6, 72)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            self.tree.setColumnWidth(col, width)
        header.sectionResized.connect(lambda col, _old, _new: col != 0 and fit_columns(self.tree))
        self.tree.viewport().installEventFilter(self)
        self.tree.selectionModel().currentChanged.connect(self._on_current)
        self.tree.doubleClicked.connect(self._on_activated)  # (not ``activated`` too: both fire)
        for key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):  # Enter loads, like a double-click
            enter = QShortcut(QKeySequence(key), self.tree)
            enter.setContext(Qt.ShortcutContext.WidgetShortcut)
            enter.activated.connect(lambda: self._on_activated(self.tree.currentIndex()))

    def _build_empty(self) -> None:
        """What shows instead of the tree before any model is found."""
        self.empty = QWidget()
        empty_layout = QVBoxLayout(self.empty)
        hint = QLabel(
            "No models found yet.\nAdd your ComfyUI or A1111 folder (Ctrl+O), or try the demo library."
        )
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint.setObjectName("muted")
        hint.setWordWrap(True)  # a narrow dock wraps it instead of cutting it
        demo = QPushButton("Open the demo library")
        demo.setObjectName("primary")
        demo.clicked.connect(self.demo_requested)
        empty_layout.addStretch(1)
        empty_layout.addWidget(hint)
        empty_layout.addWidget(demo, 0, Qt.AlignmentFlag.AlignHCenter)
        empty_layout.addStretch(2)
        self.empty.hide()

    def _build_status(self) -> QHBoxLayout:
        """The bottom row: the summary, the scan's progress, the hash pass and its stop."""
        self.progress = QProgressBar()
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.summary = QLabel("")
        self.summary.setObjectName("muted")
        # a long summary is cut, never widens the window (the full text is in the tooltip)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.hash_status = QLabel("")
        self.hash_status.setObjectName("muted")
        self.hash_status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.hash_stop = QToolButton(toolTip="Stop hashing files (hashes found so far are kept)")
        set_icon(self.hash_stop, "stop")
        self.hash_stop.clicked.connect(self._stop_hashing)
        self.hash_status.hide()
        self.hash_stop.hide()
        bottom = QHBoxLayout()
        bottom.addWidget(self.summary, 2)
        bottom.addWidget(self.progress, 1)
        bottom.addWidget(self.hash_status, 1)
        bottom.addWidget(self.hash_stop)
        return bottom

    # -- feeding ---------------------------------------------------------------------------------
    def set_empty(self, empty: bool) -> None:
        self.empty.setVisible(empty)
        self.tree.setVisible(not empty)

    def add_entries(self, entries: list[Entry]) -> None:
        self._seen.update(str(e.path) for e in entries)
        selected = self._selected_path
        before = self.model.duplicates.get(selected) if selected is not None else None
        self.model.add_entries(entries)
        self._refresh_summary()
        if selected is None:
            return
        # the selected file changed, or another file's hash made it (or not) a duplicate
        if any(str(e.path) == selected for e in entries) or self.model.duplicates.get(selected) != before:
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
        parts = summary_parts(entries, self.model.shown_count(), self.model.duplicates)
        tip = [usage_text(entries)] if entries else []
        if problems is not None:
            self._problems = list(problems)
        if self._problems:
            parts.append(f"{len(self._problems)} folder problem(s)")
            tip += ["", *self._problems]
        self.summary.setToolTip("\n".join(tip))
        if not self.progress.isVisible():
            self.summary.setText(" · ".join(parts))
        self._update_families()

    # -- the loaded model's family and the hash pass -----------------------------------------------
    def _on_models(self, models: tuple[ModelInfo, ...]) -> None:
        family = next((m.family for m in models if m.is_main), None)
        if family == self.loaded_family:
            return
        self.loaded_family = family
        self.fits.blockSignals(True)
        self.fits.setEnabled(family is not None)
        self.fits.setText(f"Fits {family}" if family else "Fits the loaded model")  # short: narrow docks
        self.fits.setToolTip(
            f"Only LoRAs made for {family} or a family that takes its LoRAs (other files stay)"
            if family
            else "Load a model to list only the LoRAs made for its family"
        )
        self.fits.setChecked(family is not None)  # on by default for each newly loaded model
        self.fits.blockSignals(False)
        self._apply_fits(self.fits.isChecked())

    def _apply_fits(self, on: bool) -> None:
        self.model.set_view(fits=self.loaded_family if on and self.loaded_family else None)

    def _on_hash_progress(self, p: HashProgress) -> None:
        running = p.running and p.total > 0
        self.hash_status.setVisible(running)
        self.hash_stop.setVisible(running)
        if running:
            name = f" ({p.current.name})" if p.current is not None else ""
            self.hash_status.setText(f"Hashing {p.done + 1}/{p.total}{name}")
            self.hash_status.setToolTip(
                "SHA-256 of every file, once (kept in the library cache): duplicates and the "
                "hashes pictures name"
            )
        else:
            self._refresh_summary()

    def _stop_hashing(self) -> None:
        self.backend.stop_hashing()
        self.hash_status.hide()
        self.hash_stop.hide()

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

    def header_state(self) -> bytes:
        """The columns' widths and order (remembered between runs by the window)."""
        return bytes(self.tree.header().saveState().data())

    def restore_header(self, state: object) -> None:
        if isinstance(state, QByteArray | bytes) and state:
            self.tree.header().restoreState(QByteArray(state))
            fit_columns(self.tree)

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

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.tree.viewport() and event.type() == QEvent.Type.Resize:
            fit_columns(self.tree)
        return super().eventFilter(watched, event)

    def _after_rebuild(self) -> None:
        for row in range(self.model.rowCount()):  # a folder's or kind's label spans the whole row
            self.tree.setFirstColumnSpanned(row, QModelIndex(), True)
        self.tree.expandAll()
        if self._selected_path is not None:
            self.tree.selectionModel().blockSignals(True)
            found = self.select_path(self._selected_path)
            self.tree.selectionModel().blockSignals(False)
            if not found:
                self._selected_path = None
                self.entry_selected.emit(None)
        self._refresh_summary()
