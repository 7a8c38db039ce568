"""Small pictures decoded off the GUI thread and kept: the library's previews (the
``name.preview.png`` / Civitai-style images beside model files). :meth:`Thumbs.get` answers at once
(the picture, or None while it is decoded) and :attr:`Thumbs.ready` says when one arrives."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QRunnable, Qt, QThreadPool, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap

from app.gui.gallery import thumbnail


class _Done(QObject):
    ready = Signal(str, QImage)


class _Job(QRunnable):
    def __init__(self, path: str, size: int, done: _Done) -> None:
        super().__init__()
        self.path, self.size, self.done = path, size, done

    def run(self) -> None:
        self.done.ready.emit(self.path, thumbnail(Path(self.path), self.size))


class Thumbs(QObject):
    ready = Signal(str)  # the picture's path

    def __init__(self, size: int = 64, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.size = size
        self._icons: dict[str, QIcon | None] = {}  # None: being decoded, or unreadable
        self._done = _Done()
        self._done.ready.connect(self._arrived, Qt.ConnectionType.QueuedConnection)

    def get(self, path: Path) -> QIcon | None:
        key = str(path)
        if key not in self._icons:
            self._icons[key] = None
            QThreadPool.globalInstance().start(_Job(key, self.size, self._done))
        return self._icons[key]

    def _arrived(self, path: str, image: QImage) -> None:
        if not image.isNull():
            self._icons[path] = QIcon(QPixmap.fromImage(image))
            self.ready.emit(path)
