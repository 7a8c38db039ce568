"""Start the Qt application."""

from __future__ import annotations

import sys


def run_gui(*, demo: bool = False, screenshot: str | None = None) -> int:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName("Loadout")
    app.setOrganizationName("Loadout")
    window = MainWindow()
    window.show()
    if screenshot:

        def shoot() -> None:
            window.grab().save(screenshot)
            app.quit()

        QTimer.singleShot(300, shoot)
    return int(app.exec())
