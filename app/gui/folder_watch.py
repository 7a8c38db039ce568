"""The library follows its folders: a file deleted, moved or added in a folder of a listed file is
read again (a rescan, from the inspect cache) half a second after the last change, instead of
waiting for F5."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer

from app.backend.backend import Backend
from core.library import Entry


class FolderWatch(QObject):
    def __init__(
        self, backend: Backend, entries: Callable[[], list[Entry]], rescan: Callable[[], None],
        parent: QObject | None = None,
    ) -> None:  # fmt: skip
        super().__init__(parent)
        self.entries = entries
        self.watcher = QFileSystemWatcher(self)
        self.soon = QTimer(self, singleShot=True, interval=500)
        self.soon.timeout.connect(rescan)
        self.watcher.directoryChanged.connect(lambda _folder: self.soon.start())
        backend.scan_done.connect(lambda _problems: self.watch())

    def watch(self) -> None:
        """Watch the folder of every listed file (those not watched yet)."""
        folders = {str(e.path.parent) for e in self.entries()} - set(self.watcher.directories())
        if folders:
            self.watcher.addPaths(sorted(folders))
