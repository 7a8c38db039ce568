"""The main window (a plain shell until the app issue fills it in)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QMainWindow


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("Loadout")
        self.resize(1280, 800)
        label = QLabel("Loadout — use `loadout inspect PATH` to inspect model files.")
        label.setMargin(24)
        self.setCentralWidget(label)
