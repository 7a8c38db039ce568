"""The gallery: every picture in the output folder, newest first, including those made in earlier
runs of the app. Thumbnails are read lazily, one per event-loop turn, so a folder of thousands
of pictures never freezes the window; new pictures appear at the front as they are saved.
Double-click shows a picture in the viewer; right-click opens the picture menu."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QIcon, QImageReader, QPixmap
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from app.gui.theme import icon
from core.generate.events import GeneratedImage

PICTURES = (".png", ".jpg", ".jpeg", ".webp")
THUMB = 96
MAX_LISTED = 2000  # the newest ones; older pictures stay on disk, reachable from the file manager
PATH_ROLE = Qt.ItemDataRole.UserRole


def pictures_in(folder: Path, limit: int = MAX_LISTED) -> list[Path]:
    """Picture files under ``folder`` (its dated sub-folders too), newest first."""
    if not folder.is_dir():
        return []
    found = []
    for p in folder.rglob("*"):
        if p.suffix.lower() in PICTURES and p.is_file():
            try:
                found.append((p.stat().st_mtime, p))
            except OSError:
                continue
    found.sort(key=lambda t: (t[0], t[1].name), reverse=True)
    return [p for _, p in found[:limit]]


def thumbnail(path: Path, size: int = THUMB) -> QPixmap:
    reader = QImageReader(str(path))
    original = reader.size()
    if original.isValid() and max(original.width(), original.height()) > size:
        reader.setScaledSize(original.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio))
    return QPixmap.fromImage(reader.read())


class GalleryPanel(QWidget):
    open_requested = Signal(object)  # Path
    menu_requested = Signal(object, QPoint)  # Path, global position

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.folder: Path | None = None
        self.strip = QListWidget()
        self.strip.setViewMode(QListWidget.ViewMode.IconMode)
        self.strip.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.strip.setMovement(QListWidget.Movement.Static)
        self.strip.setIconSize(QSize(THUMB, THUMB))
        self.strip.setUniformItemSizes(True)
        self.strip.setGridSize(QSize(THUMB + 16, THUMB + 24))
        self.strip.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.strip.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.strip.customContextMenuRequested.connect(self._menu)
        self.strip.itemDoubleClicked.connect(
            lambda item: self.open_requested.emit(Path(item.data(PATH_ROLE)))
        )
        self.strip.itemActivated.connect(lambda item: self.open_requested.emit(Path(item.data(PATH_ROLE))))
        self.empty = QLabel("Pictures you make appear here (also those of earlier sessions).")
        self.empty.setObjectName("muted")
        self.empty.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.empty)
        layout.addWidget(self.strip, 1)
        self._pending: list[QListWidgetItem] = []
        self._placeholder = icon("image")
        self._timer = QTimer(self)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._load_one)

    # -- contents --------------------------------------------------------------------------------
    def set_folder(self, folder: Path) -> None:
        """List ``folder``'s pictures (thumbnails follow lazily)."""
        self.folder = folder
        self.strip.clear()
        self._pending = []
        for path in pictures_in(folder):
            self.strip.addItem(self._item(path, ""))
        self._update_empty()
        self._timer.start()

    def add(self, images: tuple[GeneratedImage, ...]) -> None:
        """New pictures at the front, in the order given (a sweep's grid first)."""
        for image in reversed(images):
            self.remove(image.path)
            item = self._item(image.path, image.label)
            item.setToolTip(image.infotext)
            self.strip.insertItem(0, item)
        if images:
            self.strip.setCurrentRow(0)
        self._update_empty()
        self._timer.start()

    def remove(self, path: Path) -> None:
        for i in reversed(range(self.strip.count())):
            if self.strip.item(i).data(PATH_ROLE) == str(path):
                item = self.strip.takeItem(i)
                if item in self._pending:
                    self._pending.remove(item)
        self._update_empty()

    def paths(self) -> list[Path]:
        return [Path(self.strip.item(i).data(PATH_ROLE)) for i in range(self.strip.count())]

    def loading(self) -> bool:
        return bool(self._pending)

    # -- internals -------------------------------------------------------------------------------
    def _item(self, path: Path, label: str) -> QListWidgetItem:
        item = QListWidgetItem(self._placeholder, label or path.stem)
        item.setData(PATH_ROLE, str(path))
        item.setToolTip(str(path))
        self._pending.append(item)
        return item

    def _load_one(self) -> None:
        if not self._pending:
            self._timer.stop()
            return
        item = self._pending.pop(0)
        pix = thumbnail(Path(item.data(PATH_ROLE)))
        if not pix.isNull():
            item.setIcon(QIcon(pix))

    def _update_empty(self) -> None:
        self.empty.setVisible(self.strip.count() == 0)

    def _menu(self, pos: QPoint) -> None:
        item = self.strip.itemAt(pos)
        if item is not None:
            self.menu_requested.emit(Path(item.data(PATH_ROLE)), self.strip.viewport().mapToGlobal(pos))
