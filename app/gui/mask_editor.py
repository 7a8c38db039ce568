"""A small brush editor for an inpainting mask: paint white (repaint) over the starting picture,
erase with the right button, undo a stroke (Ctrl+Z), clear, feather the edge, and save as a
grayscale PNG that ``--mask`` / the workflow box take. Masks are kept in Loadout's own data folder
(:func:`mask_folder`), not beside the picture: the output folder's Gallery shows pictures only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import QPoint, QStandardPaths, Qt
from PySide6.QtGui import QColor, QImage, QKeySequence, QMouseEvent, QPainter, QPaintEvent, QPen, QShortcut
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from core.errors import FileFormatError

UNDO_STEPS = 30


def mask_folder() -> Path:
    """Where painted masks are kept: Loadout's data folder, never the pictures' output folder."""
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".loadout") / "masks"


def feathered(mask: QImage, radius: int) -> QImage:
    """``mask`` with its edge softened over about ``radius`` pixels (three box blurs, close to a
    Gaussian): the repainted part blends into the kept one instead of a hard seam."""
    if radius <= 0:
        return mask.copy()
    gray = mask.convertToFormat(QImage.Format.Format_Grayscale8)
    h, w = gray.height(), gray.width()
    rows = np.frombuffer(gray.constBits(), np.uint8).reshape(h, gray.bytesPerLine())[:, :w]
    a = rows.astype(np.float32)
    r = max(1, radius // 2)
    for axis in (0, 1, 0, 1, 0, 1):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (r + 1, r)
        c = np.cumsum(np.pad(a, pad, mode="edge"), axis=axis)
        a = (np.take(c, range(2 * r + 1, c.shape[axis]), axis=axis)
             - np.take(c, range(0, c.shape[axis] - 2 * r - 1), axis=axis)) / (2 * r + 1)  # fmt: skip
    out = np.ascontiguousarray(np.clip(np.rint(a), 0, 255).astype(np.uint8))
    return QImage(out.data, w, h, w, QImage.Format.Format_Grayscale8).copy()


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
        self.undo_stack: list[QImage] = []  # the mask before each stroke (and before a clear)
        self.setFixedSize(picture.size())

    def _remember(self) -> None:
        self.undo_stack.append(self.mask.copy())
        del self.undo_stack[:-UNDO_STEPS]

    def undo(self) -> None:
        if self.undo_stack:
            self.mask = self.undo_stack.pop()
            self.update()

    def clear(self) -> None:
        self._remember()
        self.mask.fill(0)
        self.update()

    def _stroke(self, to: QPoint, erase: bool) -> None:
        painter = QPainter(self.mask)
        color = QColor(0, 0, 0) if erase else QColor(255, 255, 255)
        painter.setPen(QPen(color, self.brush, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        painter.drawLine(self._last or to, to)
        painter.end()
        self._last = to
        self.update()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self._remember()
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
    def __init__(
        self, picture: Path | QImage, parent: QWidget | None = None, *, what: str = "to repaint"
    ) -> None:
        """``picture`` a file, or an image to paint over (a blank picture area); ``what`` the mask
        is for, in the title."""
        super().__init__(parent)
        image = picture if isinstance(picture, QImage) else QImage(str(picture))
        name = "the picture" if isinstance(picture, QImage) else picture.name
        self.setWindowTitle(f"Paint the part of {name} {what}")
        if image.isNull():
            raise FileFormatError(
                f"{name} is not a picture Loadout can read", fix="Pick a PNG, JPEG or WebP picture",
                code="not_an_image",
            )  # fmt: skip
        self.canvas = MaskCanvas(image.convertToFormat(QImage.Format.Format_RGB32))
        self.size_slider = QSlider(Qt.Orientation.Horizontal, minimum=2, maximum=200, value=self.canvas.brush)
        self.size_slider.valueChanged.connect(lambda v: setattr(self.canvas, "brush", v))
        self.feather = QSpinBox(minimum=0, maximum=128, value=4, suffix=" px")
        self.feather.setToolTip("Soften the mask's edge over this many pixels when it is saved")
        undo = QPushButton("Undo")
        undo.setToolTip("Undo the last stroke (Ctrl+Z)")
        undo.clicked.connect(self.canvas.undo)
        QShortcut(QKeySequence.StandardKey.Undo, self, activated=self.canvas.undo)
        clear = QPushButton("Clear")
        clear.clicked.connect(self.canvas.clear)
        row = QHBoxLayout()
        row.addWidget(QLabel("Brush (left paints, right erases)"))
        row.addWidget(self.size_slider, 1)
        row.addWidget(QLabel("Feather"))
        row.addWidget(self.feather)
        row.addWidget(undo)
        row.addWidget(clear)
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
        """Write the mask, feathered, as a grayscale PNG (white = repaint)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial.png")
        if not feathered(self.canvas.mask, self.feather.value()).save(str(tmp), "PNG"):
            raise OSError(f"could not write {tmp}")
        tmp.replace(path)  # atomic: a crash leaves the old mask or none
        return path
