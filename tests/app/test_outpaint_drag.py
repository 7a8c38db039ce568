"""Outpainting by dragging a picture's edge in the window's viewer (issue 33): real mouse events on
the viewport grow that side in picture pixels snapped to 8, the Generate panel's outpaint sides
follow (and move the frame back), the dragged picture becomes the starting picture, and the request
carries the sides. A screenshot at 1366 x 768: ``shots/app/outpaint-drag-1366x768.png``."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QMouseEvent
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.gui.outpaint_drag import snapped
from core.generate.outpaint_settings import Outpaint
from tests.app.conftest import SHOTS
from tests.fixtures.drawn import landscape


def _move(port: QWidget, pos: QPoint, held: bool) -> None:
    """A mouse move over the viewport, the left button held or not (QTest's mouseMove moves the
    cursor, which the offscreen platform does not turn into an event)."""
    button = Qt.MouseButton.LeftButton if held else Qt.MouseButton.NoButton
    event = QMouseEvent(
        QEvent.Type.MouseMove, QPointF(pos), QPointF(port.mapToGlobal(pos)), Qt.MouseButton.NoButton,
        button, Qt.KeyboardModifier.NoModifier,
    )  # fmt: skip
    QApplication.sendEvent(port, event)


def test_dragging_an_edge_outward_outpaints_that_side(qtbot: QtBot, make_window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    picture = landscape(tmp_path / "house.png", 256, 192)
    window = make_window()
    window.resize(1366, 768)
    window.picture.show_image(picture)
    view, panel = window.picture.view, window.generate_panel
    qtbot.waitUntil(lambda: view.viewport().width() > 200)
    view.fit()
    zoom = view.zoom()
    right = view.mapFromScene(QPointF(256, 96))  # the middle of the right edge, on screen
    port = view.viewport()
    _move(port, right, held=False)
    assert port.cursor().shape() == Qt.CursorShape.SizeHorCursor  # the edge says it can be dragged
    qtbot.mousePress(port, Qt.MouseButton.LeftButton, pos=right)
    _move(port, right + QPoint(30, 0), held=True)
    live = panel.workflows.outpaint.sides["right"].value()
    assert live == snapped(30 / zoom) and live % 8 == 0 and view.frame.isVisible()  # shown while dragging
    _move(port, right + QPoint(70, 4), held=True)
    qtbot.mouseRelease(port, Qt.MouseButton.LeftButton, pos=right + QPoint(70, 4))
    grown = snapped(70 / zoom)
    assert panel.workflows.outpaint.sides["right"].value() == grown > live
    assert view.outpaint_sides() == (0, 0, grown, 0)
    assert view.frame.rect().width() == 256 + grown  # the frame is the grown canvas
    assert panel.workflows.isChecked() and panel.workflows.init.path == picture
    panel.prompt.setPlainText("a house by the sea")
    assert panel.settings().outpaint == Outpaint(0, 0, grown, 0, panel.workflows.outpaint.feathering.value())
    panel.workflows.outpaint.sides["top"].setValue(64)  # the spin boxes move the frame too
    assert view.outpaint_sides() == (0, 64, grown, 0) and view.frame.rect().top() == -64
    SHOTS.mkdir(parents=True, exist_ok=True)
    qtbot.wait(200)
    x11 = QGuiApplication.platformName() == "xcb"  # under Xvfb + openbox: the whole screen, frame and all
    shot = window.screen().grabWindow(0) if x11 else window.grab()
    shot.save(str(SHOTS / "outpaint-drag-1366x768.png"))
    top = view.mapFromScene(QPointF(128, -64))  # the grown top edge, dragged back in: that side ends
    qtbot.mousePress(port, Qt.MouseButton.LeftButton, pos=top)
    _move(port, top + QPoint(0, 400), held=True)
    qtbot.mouseRelease(port, Qt.MouseButton.LeftButton, pos=top + QPoint(0, 400))
    assert panel.workflows.outpaint.sides["top"].value() == 0 and view.outpaint_sides()[1] == 0
    qtbot.mousePress(
        port, Qt.MouseButton.LeftButton, pos=view.mapFromScene(QPointF(128, 96))
    )  # inside: a pan
    qtbot.mouseRelease(port, Qt.MouseButton.LeftButton, pos=view.mapFromScene(QPointF(128, 96)))
    assert view.outpaint_sides() == (0, 0, grown, 0)
