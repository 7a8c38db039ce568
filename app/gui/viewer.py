"""The picture first: the window's central viewer for the current or last picture and the live
per-step preview (fit, 100 %, wheel zoom, drag to pan), with a one-line caption that never
changes the layout's height, and a sweep shown as a grid of labelled cells (double-click a cell
to view it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPoint, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QContextMenuEvent,
    QIcon,
    QImage,
    QMouseEvent,
    QPainter,
    QPixmap,
    QResizeEvent,
    QWheelEvent,
)
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsPixmapItem,
    QGraphicsScene,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.outpaint_drag import OutpaintFrame
from app.gui.widgets import ElidedLabel
from core.generate.events import GeneratedImage

ZOOM_STEP = 1.25
ZOOM_MIN, ZOOM_MAX = 0.05, 32.0
PATH_ROLE = Qt.ItemDataRole.UserRole


def rgb_pixmap(rgb: np.ndarray) -> QPixmap:
    h, w, _ = rgb.shape
    data = np.ascontiguousarray(rgb)
    image = QImage(data.data, w, h, 3 * w, QImage.Format.Format_RGB888)
    return QPixmap.fromImage(image.copy())


class PictureView(QGraphicsView):
    """One picture, fitted to the view until the user zooms (wheel) or asks for 100 %."""

    zoom_changed = Signal(float)
    menu_requested = Signal(object, QPoint)  # Path, global position

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.item = QGraphicsPixmapItem()
        self.item.setTransformationMode(Qt.TransformationMode.SmoothTransformation)
        self.scene().addItem(self.item)
        self.frame = OutpaintFrame()  # the outpainted canvas around the picture (app.gui.outpaint_drag)
        self.scene().addItem(self.frame)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        self.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setObjectName("imageView")
        self.setMinimumSize(160, 120)
        self.fitting = True
        self.path: Path | None = None

    def show_pixmap(self, pix: QPixmap, path: Path | None = None) -> None:
        self.path = path
        same_size = self.item.pixmap().size() == pix.size()
        self.item.setPixmap(pix)
        self.frame.place(self.item.boundingRect(), self.frame.sides)
        self.scene().setSceneRect(self.canvas_rect())
        if self.fitting:
            self.fit()
        elif not same_size:
            self.set_zoom(self.zoom())

    def pixmap(self) -> QPixmap:
        return self.item.pixmap()

    def outpaint_sides(self) -> tuple[int, int, int, int]:
        return self.frame.sides

    def set_outpaint(self, sides: tuple[int, int, int, int]) -> None:
        """Show the canvas grown by ``sides`` (left, top, right, bottom picture pixels) live."""
        self.frame.place(self.item.boundingRect(), sides)
        self.scene().setSceneRect(self.canvas_rect())

    def canvas_rect(self) -> QRectF:
        """The picture's rectangle with the outpainted sides (scene coordinates)."""
        return self.frame.rect() if self.frame.isVisible() else self.item.boundingRect()

    def zoom(self) -> float:
        return float(self.transform().m11())

    def set_zoom(self, factor: float) -> None:
        factor = min(ZOOM_MAX, max(ZOOM_MIN, factor))
        self.resetTransform()
        self.scale(factor, factor)
        # past 2x a pixel is a square (an artist inspects pixels), below it is smoothed
        self.item.setTransformationMode(
            Qt.TransformationMode.FastTransformation
            if factor >= 2
            else Qt.TransformationMode.SmoothTransformation
        )
        self.zoom_changed.emit(factor)

    def fit(self) -> None:
        """Fit the whole picture in the view (small pictures are enlarged too)."""
        self.fitting = True
        if self.item.pixmap().isNull():
            return
        view, rect = self.viewport().size(), self.canvas_rect()  # the grown canvas too
        factor = min(view.width() / max(1.0, rect.width()), view.height() / max(1.0, rect.height()))
        self.set_zoom(factor)
        self.centerOn(rect.center())

    def actual_size(self) -> None:
        self.fitting = False
        self.set_zoom(1.0)

    def zoom_by(self, steps: float) -> None:
        self.fitting = False
        self.set_zoom(self.zoom() * ZOOM_STEP**steps)

    def wheelEvent(self, event: QWheelEvent) -> None:
        self.zoom_by(event.angleDelta().y() / 120)
        event.accept()

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        self.fit() if not self.fitting else self.actual_size()

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        if self.path is not None:
            self.menu_requested.emit(self.path, event.globalPos())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.fitting:
            self.fit()


class SweepGrid(QListWidget):
    """A sweep's cells at a readable size, each labelled with its strength."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setViewMode(QListWidget.ViewMode.IconMode)
        self.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.setMovement(QListWidget.Movement.Static)
        self.setIconSize(QSize(256, 256))
        self.setSpacing(8)
        self.setWordWrap(True)
        self.pixmaps: list[QPixmap] = []

    def show_cells(self, cells: tuple[GeneratedImage, ...]) -> None:
        self.clear()
        self.pixmaps = [QPixmap(str(cell.path)) for cell in cells]
        for cell, pix in zip(cells, self.pixmaps, strict=True):
            item = QListWidgetItem(QIcon(pix), cell.label or cell.path.stem)
            item.setData(PATH_ROLE, str(cell.path))
            item.setToolTip(cell.infotext)
            self.addItem(item)
        self._fit_cells()

    def _fit_cells(self) -> None:
        """Cells as large as the view allows in one row (128 to 512 px), small pictures enlarged
        with square pixels so a 64 px test picture is readable too."""
        if not self.pixmaps:
            return
        n = len(self.pixmaps)
        side = (self.viewport().width() - self.spacing() * (2 * n + 2)) // n
        side = max(128, min(512, side, self.viewport().height() - 4 * self.fontMetrics().height()))
        self.setIconSize(QSize(side, side))
        for i, pix in enumerate(self.pixmaps):
            if not pix.isNull() and max(pix.width(), pix.height()) < side:
                pix = pix.scaled(
                    side, side, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.FastTransformation
                )
            self.item(i).setIcon(QIcon(pix))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_cells()


class PicturePanel(QWidget):
    """The central widget: tabs "Picture" (the viewer) and "Sweep" (the last sweep's cells)."""

    menu_requested = Signal(object, QPoint)  # Path, global position

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = PictureView()
        self.caption = ElidedLabel("No picture yet: load a model and Generate.")
        self.caption.setObjectName("muted")
        self.zoom_label = QLabel("")
        self.zoom_label.setObjectName("muted")
        self.zoom_label.setFixedWidth(self.zoom_label.fontMetrics().horizontalAdvance("0000 %") + 6)
        tools = QHBoxLayout()
        tools.setContentsMargins(4, 0, 4, 0)
        tools.addWidget(self.caption, 1)
        tools.addWidget(self.zoom_label)
        self.buttons: dict[str, QToolButton] = {}
        for key, text, tip, slot in (
            ("fit", "Fit", "Fit the picture in the view (Ctrl+0)", self.view.fit),
            ("100", "100 %", "Show the picture's real pixels (Ctrl+1)", self.view.actual_size),
            ("out", "−", "Zoom out (Ctrl+-, wheel)", lambda: self.view.zoom_by(-1)),
            ("in", "+", "Zoom in (Ctrl++, wheel)", lambda: self.view.zoom_by(1)),
        ):
            button = QToolButton(text=text, toolTip=tip, autoRaise=True)
            button.clicked.connect(slot)
            tools.addWidget(button)
            self.buttons[key] = button
        self.view.zoom_changed.connect(lambda z: self.zoom_label.setText(f"{z * 100:.0f} %"))
        self.view.menu_requested.connect(self.menu_requested)
        page = QWidget()
        page_layout = QVBoxLayout(page)
        page_layout.setContentsMargins(0, 0, 0, 0)
        page_layout.setSpacing(2)
        page_layout.addWidget(self.view, 1)
        page_layout.addLayout(tools)
        self.sweep = SweepGrid()
        self.sweep.itemDoubleClicked.connect(lambda item: self.open(Path(item.data(PATH_ROLE))))
        self.sweep.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.sweep.customContextMenuRequested.connect(self._sweep_menu)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(page, "Picture")
        self.tabs.addTab(self.sweep, "Sweep")
        self.tabs.setTabEnabled(1, False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.tabs)
        self.infotext = ""

    def show_preview(self, rgb: np.ndarray) -> None:
        """A step's preview, in the same place as the finished picture."""
        self.tabs.setCurrentIndex(0)
        self.view.show_pixmap(rgb_pixmap(rgb))
        self.caption.setText("Preview of the steps so far…")

    def show_image(self, path: Path, infotext: str = "") -> None:
        self.tabs.setCurrentIndex(0)
        self.view.show_pixmap(QPixmap(str(path)), path)
        self.infotext = infotext
        first = infotext.split("\n")[0] if infotext else ""
        self.caption.setText(f"{path.name}  ·  {first}" if first else path.name)
        self.caption.setToolTip(f"{path}\n\n{infotext}".strip())

    def open(self, path: Path) -> None:
        item = next(
            (
                self.sweep.item(i)
                for i in range(self.sweep.count())
                if self.sweep.item(i).data(PATH_ROLE) == str(path)
            ),
            None,
        )
        self.show_image(path, item.toolTip() if item is not None else read_infotext(path))

    def show_sweep(self, cells: tuple[GeneratedImage, ...]) -> None:
        self.sweep.show_cells(cells)
        self.tabs.setTabEnabled(1, True)
        self.tabs.setCurrentIndex(1)

    def _sweep_menu(self, pos: QPoint) -> None:
        item = self.sweep.itemAt(pos)
        if item is not None:
            self.menu_requested.emit(Path(item.data(PATH_ROLE)), self.sweep.viewport().mapToGlobal(pos))


def read_infotext(path: Path, read: Callable[[Path], str] | None = None) -> str:
    """The picture's parameters text, or "" when it has none (never raises)."""
    from core.errors import LoadoutError
    from core.generate.png import read_png_parameters

    try:
        return (read or read_png_parameters)(path)
    except LoadoutError:
        return ""
