"""The Generate panel's picture side: the live preview or the chosen picture, its parameters, and a
strip of the pictures made so far (newest first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QIcon, QImage, QPixmap, QResizeEvent
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from app.gui.theme import icon
from core.generate.events import GeneratedImage


def rgb_pixmap(rgb: np.ndarray) -> QPixmap:
    h, w, _ = rgb.shape
    data = np.ascontiguousarray(rgb)
    image = QImage(data.data, w, h, 3 * w, QImage.Format.Format_RGB888)
    return QPixmap.fromImage(image.copy())


class Gallery(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = QLabel(alignment=Qt.AlignmentFlag.AlignCenter)
        self.view.setMinimumSize(192, 192)
        self.view.setObjectName("imageView")
        self.view.setPixmap(icon("image").pixmap(64, 64))
        self.info = QLabel(wordWrap=True, objectName="muted")
        self.info.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.strip = QListWidget(viewMode=QListWidget.ViewMode.IconMode)
        self.strip.setIconSize(QSize(72, 72))
        self.strip.setMaximumHeight(104)
        self.strip.setFlow(QListWidget.Flow.LeftToRight)
        self.strip.setWrapping(False)
        self.strip.currentItemChanged.connect(self._show_item)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.info)
        layout.addWidget(self.strip)
        self._current: QPixmap | None = None

    def show_preview(self, rgb: np.ndarray) -> None:
        self.show_pixmap(rgb_pixmap(rgb))

    def add(self, images: tuple[GeneratedImage, ...]) -> None:
        """New pictures at the front of the strip; the first is shown."""
        first: QListWidgetItem | None = None
        for image in reversed(images):
            item = QListWidgetItem(QIcon(QPixmap(str(image.path))), image.label or image.path.stem)
            item.setData(Qt.ItemDataRole.UserRole, (str(image.path), image.infotext))
            item.setToolTip(image.infotext)
            self.strip.insertItem(0, item)
            first = item
        if first is not None:
            self.strip.setCurrentItem(first)

    def _show_item(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        path, infotext = item.data(Qt.ItemDataRole.UserRole)
        self.show_pixmap(QPixmap(path))
        self.info.setText(f"<b>{Path(path).name}</b><br>{infotext.replace(chr(10), '<br>')}")

    def show_pixmap(self, pix: QPixmap) -> None:
        self._current = pix
        self._rescale()

    def _rescale(self) -> None:
        if self._current is None or self._current.isNull():
            return
        size = self.view.size()
        mode = (
            Qt.TransformationMode.FastTransformation
            if self._current.width() * 4 <= size.width()  # a small picture stays crisp
            else Qt.TransformationMode.SmoothTransformation
        )
        self.view.setPixmap(self._current.scaled(size, Qt.AspectRatioMode.KeepAspectRatio, mode))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._rescale()
