"""The model browser panel: search, group/filter/sort controls, the tree and the scan progress.

A view over the backend's library: it listens to the worker's ``entries_found`` / ``progress`` /
``scan_done`` signals and never reads files itself. Selecting a row emits ``entry_selected``;
double-clicking (or Enter) emits ``entry_activated`` (the window loads it). "Fits the loaded
model" (on by default once a model is loaded) hides LoRAs made for other model families; the
footer says how much disk the library takes (per folder and kind in its tooltip), what duplicates
waste, and how far the background hash pass is (with a button to stop it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QItemSelectionModel, QModelIndex, QObject, Qt, Signal
from PySide6.QtGui import QKeySequence, QResizeEvent, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QSizePolicy,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import TaskProgress
from app.gui.library_cards import LibraryCardModel, LibraryCards
from app.gui.library_columns import fit_columns
from app.gui.library_filters import EmptyLibrary, LibraryFilters
from app.gui.library_model import LibraryTreeModel
from app.gui.library_summary import summary_parts, usage_text
from app.gui.theme import icon, set_icon
from app.gui.widgets import WrappedLabel
from core.library import Entry
from core.library.hasher import HashProgress
from core.session import ModelInfo

FILTERS_FROM = 420  # px of panel height: below it the filter rows fold away until asked for


class BrowserPanel(QWidget):
    entry_selected = Signal(object)  # Entry | None
    entry_activated = Signal(object)  # Entry
    demo_requested = Signal()
    folder_requested = Signal(str)  # an install found in the usual places, to add
    view_changed = Signal(str)  # "list" or "cards": the window remembers it

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
        filters = self._build_filters()
        self._build_tree()
        self._build_cards()
        self._build_empty()
        bottom = self._build_status()
        top = QHBoxLayout()
        top.setSpacing(2)
        top.addWidget(self.search, 1)
        top.addWidget(self.filters_button)
        top.addWidget(self.list_button)
        top.addWidget(self.cards_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 6)
        layout.setSpacing(6)
        layout.addLayout(top)
        layout.addWidget(filters)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.cards, 1)
        layout.addWidget(self.empty, 1)
        layout.addLayout(bottom)

    def _build_search(self) -> None:
        """The search field (names, families, trigger words)."""
        self.search = QLineEdit(placeholderText="Search names, families, trigger words  (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        set_icon(self.search.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition), "search")
        self.search.textChanged.connect(lambda t: self.model.set_view(search_text=t))

    def _build_filters(self) -> LibraryFilters:
        """Kind, family, fits; grouping, sort, duplicates (library_filters.py)."""
        filters = LibraryFilters(self.model, self._apply_fits)
        # on a short dock (a laptop's Create workspace) the two filter rows fold away, so the list
        # keeps its rows; the button shows them (and says when a filter is on)
        self.filters = filters
        self.filters_button = QToolButton(checkable=True, autoRaise=True, toolTip="Filters and sort order")
        set_icon(self.filters_button, "filter")
        self.filters_button.toggled.connect(filters.setVisible)
        self.filters_button.clicked.connect(lambda: setattr(self, "_filters_chosen", True))
        self._filters_chosen = False
        self.grouping, self.kind_filter, self.family_filter = (
            filters.grouping, filters.kind_filter, filters.family_filter,
        )  # fmt: skip
        self.sort, self.descending = filters.sort, filters.descending
        self.fits, self.only_duplicates = filters.fits, filters.only_duplicates
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

    def _build_cards(self) -> None:
        """The grid of cards (library_cards.py) and the two buttons that choose list or cards."""
        self.cards = LibraryCards(LibraryCardModel(self.model, self))
        self.cards.hide()
        self.cards.selectionModel().currentChanged.connect(
            lambda current, _previous: self._on_entry(self.cards.cards().entry(current))
        )
        self.cards.doubleClicked.connect(lambda index: self._activate(self.cards.cards().entry(index)))
        self.list_button = QToolButton(checkable=True, checked=True, autoRaise=True, toolTip="List")
        self.cards_button = QToolButton(
            checkable=True, autoRaise=True, toolTip="Cards: previews, badges and whole names"
        )
        set_icon(self.list_button, "list")
        set_icon(self.cards_button, "grid")
        self.list_button.clicked.connect(lambda: self.set_view_mode("list"))
        self.cards_button.clicked.connect(lambda: self.set_view_mode("cards"))
        self.view_mode = "list"

    def set_view_mode(self, mode: str) -> None:
        """``list`` (the tree) or ``cards`` (the grid); the selection follows."""
        mode = "cards" if mode == "cards" else "list"
        self.list_button.setChecked(mode == "list")
        self.cards_button.setChecked(mode == "cards")
        if mode == self.view_mode:
            return
        self.view_mode = mode
        if not self.empty.isVisible():
            self.tree.setVisible(mode == "list")
            self.cards.setVisible(mode == "cards")
        if self._selected_path is not None:
            self.select_path(self._selected_path)
        self.view_changed.emit(mode)

    def _build_empty(self) -> None:
        """What shows instead of the tree before any model is found."""
        self.empty = EmptyLibrary(self.demo_requested.emit, self.folder_requested.emit)
        self.empty.hide()

    def _build_status(self) -> QVBoxLayout:
        """The bottom row: the summary, the scan's progress, the hash pass and its stop."""
        self.progress = QProgressBar()
        self.progress.setMaximumHeight(14)
        self.progress.setTextVisible(False)
        self.progress.hide()
        # a long summary wraps onto a second line, never widens the window (and is never cut)
        self.summary = WrappedLabel("")
        self.summary.setObjectName("muted")
        self.hash_status = QLabel("")
        self.hash_status.setObjectName("muted")
        self.hash_status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.hash_stop = QToolButton(toolTip="Stop hashing files (hashes found so far are kept)")
        set_icon(self.hash_stop, "stop")
        self.hash_stop.clicked.connect(self._stop_hashing)
        self.hash_status.hide()
        self.hash_stop.hide()
        bottom = QVBoxLayout()  # the summary, then the hash pass on a line of its own while it runs
        bottom.setSpacing(2)
        row = QHBoxLayout()
        row.addWidget(self.summary, 2)
        row.addWidget(self.progress, 1)
        hashing = QHBoxLayout()
        hashing.addWidget(self.hash_status, 1)
        hashing.addWidget(self.hash_stop)
        bottom.addLayout(row)
        bottom.addLayout(hashing)
        return bottom

    # -- feeding ---------------------------------------------------------------------------------
    def set_empty(self, empty: bool, installs: Sequence[Path] = ()) -> None:
        """Show the empty library's hint (with ``installs`` offered) instead of the files."""
        if empty:
            self.empty.offer(installs)
        self.empty.setVisible(empty)
        self.tree.setVisible(not empty and self.view_mode == "list")
        self.cards.setVisible(not empty and self.view_mode == "cards")

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
        self.fits.setText(f"Fits {family}" if family else "Fits model")  # short: narrow docks
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
            name = f"{p.current.name}\n\n" if p.current is not None else ""  # short: narrow docks
            self.hash_status.setText(f"Hashing {p.done + 1}/{p.total}")
            self.hash_status.setToolTip(
                f"{name}SHA-256 of every file, once (kept in the library cache): duplicates and the "
                "hashes pictures name"
            )
        else:
            self._refresh_summary()

    def _stop_hashing(self) -> None:
        self.backend.stop_hashing()
        self.hash_status.hide()
        self.hash_stop.hide()

    def _update_families(self) -> None:
        self.filters.set_families(self.model.families())

    # -- selection -------------------------------------------------------------------------------
    def current_entry(self) -> Entry | None:
        if self.view_mode == "cards":
            return self.cards.cards().entry(self.cards.currentIndex())
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
        card = self.cards.cards().index_of(str(path))
        if card.isValid():
            self.cards.selectionModel().blockSignals(True)  # the tree's selection said it already
            self.cards.setCurrentIndex(card)
            self.cards.selectionModel().blockSignals(False)
            self.cards.scrollTo(card)
        return True

    def header_state(self) -> bytes:
        """The columns' widths and order (remembered between runs by the window)."""
        return bytes(self.tree.header().saveState().data())

    def restore_header(self, state: object, view: object = None) -> None:
        """The columns' widths and order, and list or cards, as the window remembered them."""
        self.set_view_mode(str(view or "list"))
        if isinstance(state, QByteArray | bytes) and state:
            self.tree.header().restoreState(QByteArray(state))
            fit_columns(self.tree)

    def focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self._on_entry(self.model.entry(current))

    def _on_entry(self, entry: Entry | None) -> None:
        self._selected_path = str(entry.path) if entry is not None else None
        self.entry_selected.emit(entry)

    def _on_activated(self, index: QModelIndex) -> None:
        self._activate(self.model.entry(index))

    def _activate(self, entry: Entry | None) -> None:
        if entry is not None:
            self.entry_activated.emit(entry)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if not self._filters_chosen:  # until the artist chooses: shown where there is room
            self.filters_button.setChecked(event.size().height() >= FILTERS_FROM)
            self.filters.setVisible(self.filters_button.isChecked())

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
