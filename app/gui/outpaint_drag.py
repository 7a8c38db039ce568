"""Outpainting by dragging a picture's edge in the viewer: pressing within a few screen pixels of an
edge of the picture (or of the canvas already grown) and dragging outward grows that side, in
picture pixels snapped to 8 (ComfyUI's ImagePadForOutpaint steps), up to the largest growth; the
grown canvas is drawn live as a tinted, dashed frame around the picture. The sides are the Generate
panel's outpaint settings (both ways: the spin boxes move the frame, a drag sets the spin boxes),
and a drag on a picture that is not the starting picture makes it the starting picture."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPen
from PySide6.QtWidgets import QGraphicsRectItem

from app.gui.outpaint_controls import SIDES
from core.generate.outpaint_settings import MAX_GROWTH

GRAB = 8  # screen pixels either side of an edge that take a drag
SNAP = 8  # picture pixels a side grows by


def snapped(pixels: float) -> int:
    """Picture pixels snapped to :data:`SNAP`, within 0..MAX_GROWTH."""
    return int(min(MAX_GROWTH, max(0, round(pixels / SNAP) * SNAP)))


class OutpaintFrame(QGraphicsRectItem):
    """The grown canvas: the picture's rectangle pushed out by the four sides, under the picture."""

    def __init__(self) -> None:
        super().__init__()
        pen = QPen(QColor("#74c0fc"), 2, Qt.PenStyle.DashLine)
        pen.setCosmetic(True)
        self.setPen(pen)
        self.setBrush(QColor(116, 192, 252, 96))
        self.setZValue(-1)
        self.sides = (0, 0, 0, 0)
        self.setVisible(False)

    def place(self, picture: QRectF, sides: tuple[int, int, int, int]) -> None:
        self.sides = sides
        left, top, right, bottom = sides
        self.setRect(picture.adjusted(-left, -top, right, bottom))
        self.setVisible(any(sides) and not picture.isEmpty())


def _outward(side: str, press: QPointF, now: QPointF) -> float:
    return {
        "left": press.x() - now.x(), "right": now.x() - press.x(),
        "top": press.y() - now.y(), "bottom": now.y() - press.y(),
    }[side]  # fmt: skip


class EdgeDrag(QObject):
    """The event filter on a :class:`~app.gui.viewer.PictureView`'s viewport that turns a drag of an
    edge into that side's growth (``changed(side, pixels)`` while it moves, ``finished`` on release)."""

    changed = Signal(str, int)
    finished = Signal()

    def __init__(self, view: object) -> None:
        super().__init__()
        self.view = view
        #: the side dragged, its growth at the press, where the press was (viewport pixels)
        self.drag: tuple[str, int, QPointF] | None = None
        viewport = view.viewport()  # type: ignore[attr-defined]
        viewport.setMouseTracking(True)
        viewport.installEventFilter(self)

    def side_at(self, pos: QPointF) -> str | None:
        """The edge of the grown canvas under ``pos`` (viewport pixels), if a picture is shown."""
        view = self.view
        if view.pixmap().isNull():  # type: ignore[attr-defined]
            return None
        canvas = view.canvas_rect()  # type: ignore[attr-defined]
        r = view.mapFromScene(canvas).boundingRect()  # type: ignore[attr-defined]
        x, y = pos.x(), pos.y()
        inside_y, inside_x = (
            r.top() - GRAB <= y <= r.bottom() + GRAB,
            r.left() - GRAB <= x <= r.right() + GRAB,
        )
        near = {
            "left": inside_y and abs(x - r.left()) <= GRAB,
            "right": inside_y and abs(x - r.right()) <= GRAB,
            "top": inside_x and abs(y - r.top()) <= GRAB,
            "bottom": inside_x and abs(y - r.bottom()) <= GRAB,
        }
        return next((s for s in SIDES if near[s]), None)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if not isinstance(event, QMouseEvent) or kind not in (
            QEvent.Type.MouseButtonPress, QEvent.Type.MouseMove, QEvent.Type.MouseButtonRelease
        ):  # fmt: skip
            return False
        view, pos = self.view, event.position()  # in viewport pixels: the scene moves as it grows
        if kind == QEvent.Type.MouseButtonPress and event.button() == Qt.MouseButton.LeftButton:
            side = self.side_at(pos)
            if side is None:
                return False
            self.drag = (side, view.outpaint_sides()[SIDES.index(side)], pos)  # type: ignore[attr-defined]
            return True
        if kind == QEvent.Type.MouseMove and self.drag is not None:
            side, start, press = self.drag
            zoom = view.zoom()  # type: ignore[attr-defined]
            self.changed.emit(side, snapped(start + _outward(side, press, pos) / zoom))
            return True
        if kind == QEvent.Type.MouseButtonRelease and self.drag is not None:
            self.drag = None
            self.finished.emit()
            return True
        if kind == QEvent.Type.MouseMove and not event.buttons():
            side = self.side_at(pos)
            if side is None:
                view.viewport().setCursor(Qt.CursorShape.OpenHandCursor)  # type: ignore[attr-defined]
                return False
            horizontal = side in ("left", "right")
            shape = Qt.CursorShape.SizeHorCursor if horizontal else Qt.CursorShape.SizeVerCursor
            view.viewport().setCursor(shape)  # type: ignore[attr-defined]
            return True  # the view would put its hand back
        return False


def connect_outpaint_drag(view: object, workflows: object) -> EdgeDrag:
    """Tie the viewer's edges to the Generate panel's outpaint sides (``workflows``: its
    :class:`~app.gui.workflow_controls.WorkflowControls`)."""
    drag = EdgeDrag(view)
    boxes = workflows.outpaint.sides  # type: ignore[attr-defined]

    def show() -> None:
        view.set_outpaint(tuple(boxes[s].value() for s in SIDES))  # type: ignore[attr-defined]
        if view.fitting and drag.drag is None:  # type: ignore[attr-defined]
            view.fit()  # type: ignore[attr-defined]  # the whole canvas in sight (not mid-drag: the zoom holds)

    def dragged(side: str, pixels: int) -> None:
        boxes[side].setValue(pixels)  # the frame follows through the box's signal

    def done() -> None:
        path = view.path  # type: ignore[attr-defined]
        if path is not None and workflows.init.path != path:  # type: ignore[attr-defined]
            workflows.init.set_path(path)  # type: ignore[attr-defined]
        workflows.setChecked(True)  # type: ignore[attr-defined]
        if view.fitting:  # type: ignore[attr-defined]
            view.fit()  # type: ignore[attr-defined]

    for box in boxes.values():
        box.valueChanged.connect(show)
    drag.changed.connect(dragged)
    drag.finished.connect(done)
    drag.setParent(view)  # type: ignore[call-overload]
    return drag
