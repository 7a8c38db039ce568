"""The window's actions and its toolbar (built once; the window keeps the actions)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QToolBar, QWidget

from app.gui.theme import set_icon


def make_action(
    owner: QWidget, name: str, text: str, shortcut: QKeySequence | str, slot: object, tip: str
) -> QAction:
    """An action of ``owner`` (its shortcut works anywhere in the window) with an icon and a tip
    that names the shortcut."""
    action = QAction(text, owner)
    set_icon(action, name)
    action.setShortcut(QKeySequence(shortcut))
    action.setToolTip(f"{tip} ({QKeySequence(shortcut).toString(QKeySequence.SequenceFormat.NativeText)})")
    action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action.triggered.connect(slot)
    owner.addAction(action)
    return action


def main_toolbar(left: Sequence[QAction], right: Sequence[QAction], stop: QAction) -> QToolBar:
    """``left`` actions, a stretch, then ``right``; the stop action's button gets its own style name."""
    toolbar = QToolBar("Main")
    toolbar.setObjectName("toolbar")
    toolbar.setMovable(False)
    toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    for action in left:
        toolbar.addAction(action)
    spacer = QWidget()
    spacer.setSizePolicy(
        spacer.sizePolicy().horizontalPolicy().Expanding, spacer.sizePolicy().verticalPolicy()
    )
    toolbar.addWidget(spacer)  # its action follows the left ones: widgets can be inserted before it
    for action in right:
        toolbar.addAction(action)
    stop_button = toolbar.widgetForAction(stop)
    if stop_button is not None:
        stop_button.setObjectName("interruptButton")
    return toolbar
