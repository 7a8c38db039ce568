"""The theme is applied when it changes and only then: setting the application's style sheet
re-polishes every widget (each window the tests build paid it again for the same theme)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QLabel
from pytestqt.qtbot import QtBot

from app.gui.theme import apply_theme, is_dark


class StyleChanges(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        self.count += event.type() == QEvent.Type.StyleChange
        return False


def test_the_theme_switches_and_the_same_theme_again_changes_nothing(qtbot: QtBot) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    was_dark = is_dark()
    label = QLabel("a widget the theme styles")
    qtbot.addWidget(label)
    label.show()
    changes = StyleChanges()
    label.installEventFilter(changes)
    try:
        apply_theme(app, False)
        light = (app.styleSheet(), app.palette().color(QPalette.ColorRole.Window).name(), is_dark())
        apply_theme(app, True)
        dark = (app.styleSheet(), app.palette().color(QPalette.ColorRole.Window).name(), is_dark())
        assert light[0] != dark[0] and light[1] != dark[1] and (light[2], dark[2]) == (False, True)
        assert changes.count > 0  # a change restyles the widgets
        changes.count = 0
        apply_theme(app, True)  # the same theme: nothing to restyle
        assert changes.count == 0
        assert (app.styleSheet(), app.palette().color(QPalette.ColorRole.Window).name(), is_dark()) == dark
    finally:
        label.removeEventFilter(changes)
        apply_theme(app, was_dark)
