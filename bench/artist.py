"""An artist at the real window, counted: clicks, double-clicks, scrolls and typed text, each sent
as the mouse and key events Qt delivers (``QTest``), never by calling the slot a click would call.

Before each click the target must be whole in view; when it is not, the artist scrolls to it first
(a scroll is counted) — so a count says what a person really does to get there. Used by
``bench/first_picture.py`` (seconds and counts) and its test (the counts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QModelIndex, QPoint, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractItemView, QApplication, QFileDialog, QPushButton, QWidget


@dataclass
class Artist:
    clicks: int = 0
    double_clicks: int = 0
    scrolls: int = 0
    typed: int = 0  # characters
    steps: list[str] = field(default_factory=list)  # what was done, in order

    def _note(self, what: str) -> None:
        self.steps.append(what)

    @staticmethod
    def in_view(widget: QWidget) -> bool:
        """Shown whole: visible, not cut by a scroll area or the window's edge."""
        return widget.isVisible() and widget.visibleRegion().boundingRect() == widget.rect()

    @staticmethod
    def look(ms: int = 200) -> None:
        """A moment to look before acting (the window lays itself out, as a person sees it)."""
        QTest.qWait(ms)

    def click(self, widget: QWidget, what: str) -> None:
        if not self.in_view(widget):
            self.scrolls += 1
            self._note(f"scroll to {what}")
            parent = widget.parentWidget()
            while parent is not None and not hasattr(parent, "ensureWidgetVisible"):
                parent = parent.parentWidget()
            if parent is not None:
                parent.ensureWidgetVisible(widget)  # type: ignore[attr-defined]
        self.clicks += 1
        self._note(f"click {what}")
        left, none = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
        QTest.mouseClick(widget, left, none, widget.rect().center())

    def _row(self, view: QAbstractItemView, index: QModelIndex, what: str) -> QPoint:
        rect = view.visualRect(index)
        if not view.viewport().rect().contains(rect):
            self.scrolls += 1
            self._note(f"scroll to {what}")
            view.scrollTo(index)
            rect = view.visualRect(index)
        return rect.center()

    def click_row(self, view: QAbstractItemView, index: QModelIndex, what: str) -> None:
        pos = self._row(view, index, what)
        self.clicks += 1
        self._note(f"click {what}")
        QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, pos)

    def double_click_row(self, view: QAbstractItemView, index: QModelIndex, what: str) -> None:
        pos = self._row(view, index, what)
        self.double_clicks += 1
        self._note(f"double-click {what}")
        viewport = view.viewport()
        QTest.mouseClick(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, pos)
        QTest.mouseDClick(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, pos)

    def type(self, widget: QWidget, text: str, what: str) -> None:
        self.typed += len(text)
        self._note(f"type {what}")
        QTest.keyClicks(widget, text)

    def in_folder_dialog(self, name: str, then: Callable[[], None] | None = None) -> None:
        """When the folder dialog opens (modal: it runs its own loop), click ``name`` in its list
        and then its Choose button."""

        def act() -> None:
            dialog = QApplication.activeModalWidget()
            if not isinstance(dialog, QFileDialog):
                QTimer.singleShot(20, act)
                return
            view = dialog.findChild(QAbstractItemView, "listView")
            model = view.model() if view is not None else None
            start = model.index(0, 0, view.rootIndex()) if model is not None else None
            found = model.match(start, Qt.ItemDataRole.DisplayRole, name) if model is not None else []
            if view is None or not found:  # its folder is still being read
                QTimer.singleShot(20, act)
                return
            self.click_row(view, found[0], f"{name} in the folder dialog")
            buttons = dialog.findChildren(QPushButton)
            choose = next(b for b in buttons if b.text().replace("&", "") in ("Choose", "Open"))
            self.click(choose, "Choose")
            if then is not None:
                then()

        QTimer.singleShot(0, act)

    def summary(self) -> dict[str, object]:
        return {
            "clicks": self.clicks + self.double_clicks,
            "of_them_double_clicks": self.double_clicks,
            "scrolls": self.scrolls,
            "typed_characters": self.typed,
            "actions": list(self.steps),
        }
