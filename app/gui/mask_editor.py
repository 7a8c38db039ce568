"""A small brush editor for an inpainting mask: paint white (repaint) over the starting picture,
erase with the right button, save as a black-and-white PNG that ``--mask`` / the workflow box take."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QImage, QMouseEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from core.errors import FileFormatError


class MaskCanvas(QWidget):
    """The picture with the mask painted over it in translucent red; the mask itself is a
    grayscale image of the picture's size (white = repaint)."""

    def __init__(self, picture: QImage, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.picture = picture
        self.mask = QImage(picture.size(), QImage.Format.Format_Grayscale8)
        self.mask.fill(0)
        self.brush = 24
        self._last: QPoint | None = None
        self.setFixedSize(picture.size())

    def _stroke(self, to: QPoint, erase: bool) -> None:
        painter = QPainter(self.mask)
        color = QColor(0, 0, 0) if erase else QColor(255, 255, 255)
        painter.setPen(QPen(color, self.brush, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        painter.drawLine(self._last or to, to)
        painter.end()
        self._last = to
        self.update()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self._last = None
        self._stroke(event.position().toPoint(), event.button() == Qt.MouseButton.RightButton)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        erase = bool(event.buttons() & Qt.MouseButton.RightButton)
        if event.buttons() & (Qt.MouseButton.LeftButton | Qt.MouseButton.RightButton):
            self._stroke(event.position().toPoint(), erase)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        self._last = None

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.drawImage(0, 0, self.picture)
        overlay = QImage(self.mask.size(), QImage.Format.Format_ARGB32)
        overlay.fill(QColor(255, 60, 60))
        overlay.setAlphaChannel(self.mask)
        painter.setOpacity(0.5)
        painter.drawImage(0, 0, overlay)
        painter.end()


class MaskEditor(QDialog):
    def __init__(self, picture: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Paint the part of {picture.name} to repaint")
        image = QImage(str(picture))
        if image.isNull():
            raise FileFormatError(
                f"{picture.name} is not a picture Loadout can read", fix="Pick a PNG, JPEG or WebP picture",
                code="not_an_image",
            )  # fmt: skip
        self.canvas = MaskCanvas(image.convertToFormat(QImage.Format.Format_RGB32))
        self.size_slider = QSlider(Qt.Orientation.Horizontal, minimum=2, maximum=200, value=self.canvas.brush)
        self.size_slider.valueChanged.connect(lambda v: setattr(self.canvas, "brush", v))
        row = QHBoxLayout()
        row.addWidget(QLabel("Brush (left paints, right erases)"))
        row.addWidget(self.size_slider, 1)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.canvas)
        layout.addLayout(row)
        layout.addWidget(buttons)

    def save(self, path: Path) -> Path:
        """Write the mask as a grayscale PNG (white = repaint)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial.png")
        if not self.canvas.mask.save(str(tmp), "PNG"):
            raise OSError(f"could not write {tmp}")
        tmp.replace(path)  # atomic: a crash leaves the old mask or none
        return path
