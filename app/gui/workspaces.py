"""Workspaces: the whole window for one job, and back with one click or shortcut.

- **Create** (Alt+1): the daily loop: model, prompt, settings and Generate, the picture, the recent
  pictures, the LoRA stack; every panel a dock around the picture.
- **Library** (Alt+2): the library and the selected file's details side by side, full width.
- **Memory** (Alt+3): the memory plot and the manager's decisions, large enough to read.
- **Queue** (Alt+4): the queued grids and their cells.

A workspace other than Create borrows its panels from their docks (the docks' layout is saved and
every dock hidden, so the workspace gets the whole window) and gives them back when Create returns
(the docks' layout restored as it was).
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QByteArray, QObject, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTabBar,
    QWidget,
)

#: name, title, the docks (keys) whose panels it shows side by side, their share of the width
WORKSPACES: tuple[tuple[str, str, tuple[str, ...], tuple[int, ...]], ...] = (
    ("create", "Create", (), ()),
    ("library", "Library", ("library", "details"), (3, 1)),
    ("memory", "Memory", ("memory", "testrun"), (3, 1)),
    ("queue", "Queue", ("queue",), (1,)),
)


class Workspaces(QObject):
    changed = Signal(str)

    def __init__(
        self, window: QMainWindow, stack: QStackedWidget, create: QWidget, docks: dict[str, QDockWidget]
    ) -> None:
        super().__init__(window)
        self.window, self.stack, self.docks = window, stack, docks
        self.current = "create"
        self._state: QByteArray | None = None  # the docks' layout while another workspace shows
        self._borrowed: list[tuple[QScrollArea, QWidget]] = []
        self.pages: dict[str, QWidget] = {"create": create}
        stack.addWidget(create)
        self.tabs = QTabBar()
        self.tabs.setObjectName("workspaces")
        self.tabs.setDrawBase(False)
        self.tabs.setExpanding(False)
        self.names: list[str] = []
        self.actions: list[QAction] = []  # the View menu lists them
        for i, (name, title, keys, _shares) in enumerate(WORKSPACES):
            if any(k not in docks for k in keys):
                continue
            self.names.append(name)
            self.tabs.addTab(title)
            self.tabs.setTabToolTip(len(self.names) - 1, f"{title} (Alt+{len(self.names)})")
            if name != "create":
                page = QSplitter(Qt.Orientation.Horizontal)
                page.setChildrenCollapsible(False)
                page.setObjectName(f"workspace_{name}")
                self.pages[name] = page
                stack.addWidget(page)
            action = QAction(f"{title} workspace", window)
            action.setShortcut(QKeySequence(f"Alt+{len(self.names)}"))
            action.triggered.connect(self._switcher(name))
            window.addAction(action)
            self.actions.append(action)
            del i
        self.tabs.currentChanged.connect(lambda index: self.show(self.names[index]))

    def _switcher(self, name: str):  # type: ignore[no-untyped-def]
        return lambda: self.show(name)

    def show(self, name: str) -> None:
        """Make ``name`` the workspace (Create gives every borrowed panel back to its dock)."""
        if name == self.current or name not in self.pages:
            return
        if self.current != "create":
            self._give_back()
        if name != "create":
            self._borrow(name)
        self.current = name
        self.stack.setCurrentWidget(self.pages[name])
        self.tabs.blockSignals(True)
        self.tabs.setCurrentIndex(self.names.index(name))
        self.tabs.blockSignals(False)
        self.changed.emit(name)

    def _borrow(self, name: str) -> None:
        keys, shares = next((k, s) for n, _t, k, s in WORKSPACES if n == name)
        if self._state is None:
            self._state = self.window.saveState()
        for dock in self.docks.values():
            dock.hide()
        page = self.pages[name]
        assert isinstance(page, QSplitter)
        for key in keys:
            area = self.docks[key].widget()
            assert isinstance(area, QScrollArea)
            fitted = area.takeWidget()  # the panel in its holder (dock_layout.Fitted)
            self._borrowed.append((area, fitted))
            holder = QScrollArea()  # the panel still scrolls where the window is short of room
            holder.setWidgetResizable(True)
            holder.setFrameShape(QScrollArea.Shape.NoFrame)
            holder.setWidget(fitted)
            page.addWidget(holder)
            fitted.show()
        page.setSizes([share * 1000 for share in shares])

    def _give_back(self) -> None:
        page = self.pages[self.current]
        holders = [page.widget(i) for i in range(page.count())]
        for holder, (area, fitted) in zip(holders, self._borrowed, strict=True):
            assert isinstance(holder, QScrollArea)
            holder.takeWidget()
            area.setWidget(fitted)
            fitted.show()
            holder.setParent(None)
            holder.deleteLater()
        self._borrowed.clear()
        if self._state is not None:
            self.window.restoreState(self._state)
            self._state = None

    def visible_docks(self) -> Sequence[str]:
        return [k for k, d in self.docks.items() if d.isVisible()]
