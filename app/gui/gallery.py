"""The gallery: every picture in the output folder, newest first, including those made in earlier
runs of the app. Thumbnails are decoded off the GUI thread (Qt's thread pool, a few at a time) and
shown as they arrive, so a folder of thousands of large pictures never freezes the window; new
pictures appear at the front as they are saved.
Double-click shows a picture in the viewer; right-click opens the picture menu."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QPoint, QRect, QRunnable, QSize, Qt, QThreadPool, Signal
from PySide6.QtGui import QIcon, QImage, QImageReader, QPainter, QPixmap
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


def picture_label(path: Path) -> str:
    """A picture's name in the gallery: a grid's cells and grids carry their grid's name, so the
    cells of two grids (both ``x0-y0-z0``) read apart."""
    if path.parent.parent.name == "grids":
        return f"{path.parent.name} {path.stem}"
    return path.stem


def thumbnail(path: Path, size: int = THUMB) -> QImage:
    """The picture scaled to fit ``size`` (a QImage: safe to make on any thread)."""
    reader = QImageReader(str(path))
    original = reader.size()
    if original.isValid() and max(original.width(), original.height()) > size:
        reader.setScaledSize(original.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio))
    return reader.read()


def placeholder(size: int = THUMB) -> QIcon:
    """The icon shown until a thumbnail arrives: the picture icon centred on a square as large as a
    thumbnail (the strip's items are sized once, from the first: a smaller placeholder cut every
    thumbnail and hid its name)."""
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    icon("image").paint(painter, QRect(size // 4, size // 4, size // 2, size // 2))
    painter.end()
    return QIcon(pixmap)


class _Done(QObject):
    """Carries a finished thumbnail to the GUI thread (queued). Parentless and held by the job, so
    a gallery closed while a job runs only loses the connection."""

    ready = Signal(str, QImage)


class _ThumbJob(QRunnable):
    def __init__(self, path: str, done: _Done) -> None:
        super().__init__()
        self.path, self.done = path, done

    def run(self) -> None:
        self.done.ready.emit(self.path, thumbnail(Path(self.path)))


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
        # one row of thumbnails with their names whole, whatever the dock's default height
        self.strip.setMinimumHeight(THUMB + 24 + 2 * max(self.strip.frameWidth(), 2) + 2)
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
        layout.addWidget(self.empty, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.strip, 1)
        # room for the strip's row from the start: the first picture does not push the dock
        self.setMinimumHeight(self.strip.minimumHeight() + 8)
        self._pending: list[str] = []  # paths waiting for a thumbnail, in order
        self._running = 0
        self._placeholder = placeholder()
        self._done = _Done()
        self._done.ready.connect(self._thumbnail_ready, Qt.ConnectionType.QueuedConnection)
        self._pool = QThreadPool.globalInstance()

    # -- contents --------------------------------------------------------------------------------
    def set_folder(self, folder: Path) -> None:
        """List ``folder``'s pictures (thumbnails follow lazily)."""
        self.folder = folder
        self.strip.clear()
        self._pending = []
        for path in pictures_in(folder):
            self.strip.addItem(self._item(path, ""))
        self._update_empty()
        self._start_jobs()

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
        self._start_jobs()

    def add_files(self, found: list[tuple[Path, str]]) -> None:
        """Pictures made elsewhere (the queue's cells and grids) with their labels, at the front."""
        for path, label in reversed(found):
            self.remove(path)
            self.strip.insertItem(0, self._item(path, label))
        self._update_empty()
        self._start_jobs()

    def remove(self, path: Path) -> None:
        for i in reversed(range(self.strip.count())):
            if self.strip.item(i).data(PATH_ROLE) == str(path):
                self.strip.takeItem(i)
                if str(path) in self._pending:
                    self._pending.remove(str(path))
        self._update_empty()

    def paths(self) -> list[Path]:
        return [Path(self.strip.item(i).data(PATH_ROLE)) for i in range(self.strip.count())]

    def loading(self) -> bool:
        return bool(self._pending) or self._running > 0

    # -- internals -------------------------------------------------------------------------------
    def _item(self, path: Path, label: str) -> QListWidgetItem:
        item = QListWidgetItem(self._placeholder, label or picture_label(path))
        item.setData(PATH_ROLE, str(path))
        item.setToolTip(str(path))
        self._pending.append(str(path))
        return item

    def _start_jobs(self, at_once: int = 2) -> None:
        while self._pending and self._running < at_once:
            self._running += 1
            self._pool.start(_ThumbJob(self._pending.pop(0), self._done))

    def _thumbnail_ready(self, path: str, image: QImage) -> None:
        self._running -= 1
        if not image.isNull():
            for i in range(self.strip.count()):
                item = self.strip.item(i)
                if item.data(PATH_ROLE) == path:
                    item.setIcon(QIcon(QPixmap.fromImage(image)))
        self._start_jobs()

    def _update_empty(self) -> None:
        """The hint while there is no picture (no empty box), the strip once there is one."""
        self.empty.setVisible(self.strip.count() == 0)
        self.strip.setVisible(self.strip.count() > 0)

    def _menu(self, pos: QPoint) -> None:
        item = self.strip.itemAt(pos)
        if item is not None:
            self.menu_requested.emit(Path(item.data(PATH_ROLE)), self.strip.viewport().mapToGlobal(pos))
