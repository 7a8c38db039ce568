"""The Settings dialog opens within the screen with every wrapped text at its full height (its
second line was cut off when a row of a form held it, and the dialog outgrew a 1280x720 screen)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from app.gui.settings import AppSettings, SettingsDialog


def test_the_settings_dialog_fits_the_screen_and_cuts_no_text(qtbot) -> None:
    dialog = SettingsDialog(AppSettings(fp8_matmul=True))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    screen = dialog.screen().availableGeometry()
    assert dialog.height() <= screen.height() and dialog.width() <= screen.width()
    wrapped = [label for label in dialog.findChildren(QLabel) if label.wordWrap() and label.text()]
    assert len(wrapped) >= 3  # the folders' hint, the VRAM explanation, the fp8 hint
    for label in wrapped:
        assert label.height() >= label.heightForWidth(label.width()), label.text()
    body = dialog.body.widget()
    if dialog.body.verticalScrollBar().maximum() == 0:  # all in view: the dialog is as tall as it needs
        assert dialog.body.viewport().height() >= body.heightForWidth(dialog.body.viewport().width())
