"""Drawing a region's box: the picture's area (scaled to fit) with every region's box on it; a drag
draws the chosen region's box, snapped to whole latent cells of 8 pixels and kept inside the
picture."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

#: the canvas's longest side on screen, in screen pixels
CANVAS_SIDE = 512
#: boxes snap to whole latent cells
SNAP = 8

PixelBox = tuple[int, int, int, int]  # x, y, width, height in picture pixels


class BoxCanvas(QWidget):
    """The picture's ``size`` (width, height) scaled to fit :data:`CANVAS_SIDE`; ``boxes`` every
    region's box, ``current`` the one a drag redraws."""

    def __init__(
        self, size: tuple[int, int], boxes: list[PixelBox | None], current: int, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.picture = size
        self.boxes = list(boxes)
        self.current = current
        self.scale = min(1.0, CANVAS_SIDE / max(size))
        self._start: QPointF | None = None
        self.setFixedSize(round(size[0] * self.scale), round(size[1] * self.scale))
        self.setCursor(Qt.CursorShape.CrossCursor)

    def _to_picture(self, p: QPointF) -> tuple[int, int]:
        w, h = self.picture
        x = min(max(p.x() / self.scale, 0.0), w)
        y = min(max(p.y() / self.scale, 0.0), h)
        return round(x / SNAP) * SNAP, round(y / SNAP) * SNAP

    def _drag(self, to: QPointF) -> None:
        assert self._start is not None
        (x0, y0), (x1, y1) = self._to_picture(self._start), self._to_picture(to)
        x, y = min(x0, x1), min(y0, y1)
        w, h = max(abs(x1 - x0), SNAP), max(abs(y1 - y0), SNAP)
        pw, ph = self.picture
        self.boxes[self.current] = (min(x, pw - w), min(y, ph - h), w, h)
        self.update()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        self._start = event.position()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._start is not None and event.buttons() & Qt.MouseButton.LeftButton:
            self._drag(event.position())

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if self._start is not None:
            self._drag(event.position())
        self._start = None

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(60, 60, 66))
        for i, box in enumerate(self.boxes):
            if box is None:
                continue
            mine = i == self.current
            painter.setPen(QPen(QColor(255, 200, 60) if mine else QColor(170, 170, 190), 3 if mine else 1))
            painter.setBrush(QColor(255, 200, 60, 60) if mine else Qt.BrushStyle.NoBrush)
            x, y, w, h = (v * self.scale for v in box)
            painter.drawRect(QRectF(x, y, w, h))
            painter.drawText(QPointF(x + 4, y + 14), str(i + 1))
        painter.end()

    def box(self) -> PixelBox | None:
        return self.boxes[self.current]


class BoxDialog(QDialog):
    def __init__(
        self, size: tuple[int, int], boxes: list[PixelBox | None], current: int, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Draw region {current + 1}'s box on the {size[0]}x{size[1]} picture")
        self.canvas = BoxCanvas(size, boxes, current)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Drag to draw the box (the others are shown in grey)"))
        layout.addWidget(self.canvas)
        layout.addWidget(buttons)
