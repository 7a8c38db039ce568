"""The mouse wheel scrolls the panel under it; it changes a value only in the control being edited.

Qt's spin boxes, combo boxes and sliders take a wheel turn over them as "change the value", so
scrolling down the Generate panel switched the sampler on the way. One filter on the application
(:func:`install`) stops that for every such control, present and future: a wheel turn over one
that does not have the keyboard focus goes to the scroll area around it instead (or nowhere).
Click into the control (or Tab to it) and the wheel changes its value as before.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

_GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)


def _guarded(obj: QObject) -> QWidget | None:
    """The value control ``obj`` is (or is part of: a spin box's line edit), if any."""
    widget = obj if isinstance(obj, QWidget) else None
    while widget is not None:
        if isinstance(widget, QScrollBar):
            return None  # a scroll bar is for scrolling
        if isinstance(widget, _GUARDED):
            return widget
        if widget.isWindow():
            return None
        widget = widget.parentWidget()
        if widget is not None and not isinstance(widget, _GUARDED):
            return None  # only the control itself and its direct parts
    return None


class WheelGuard(QObject):
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Polish and isinstance(obj, _GUARDED):
            _no_wheel_focus(obj)
            return False
        if event.type() != QEvent.Type.Wheel:
            return False
        control = _guarded(obj)
        if control is None or control.hasFocus():
            return False
        assert isinstance(event, QWheelEvent)
        area = _scroll_area_around(control)
        if area is not None:
            delta = event.angleDelta()
            bar = area.horizontalScrollBar() if abs(delta.x()) > abs(delta.y()) else area.verticalScrollBar()
            QApplication.sendEvent(bar, event)
        return True  # the control itself never sees it


def _scroll_area_around(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea) and not isinstance(parent, QComboBox):
            return parent
        parent = parent.parentWidget()
    return None


def install(app: QApplication) -> WheelGuard:
    """Install the guard on ``app`` once (later calls return the same guard)."""
    existing = app.findChild(WheelGuard)
    if existing is not None:
        return existing
    guard = WheelGuard(app)
    app.installEventFilter(guard)
    for widget in app.allWidgets():  # those made before: later ones are changed as they are polished
        if isinstance(widget, _GUARDED):
            _no_wheel_focus(widget)
    return guard


def _no_wheel_focus(widget: QWidget) -> None:
    """Qt gives a WheelFocus control the focus when the wheel turns over it (before any filter sees
    the turn); a click or Tab still focuses it."""
    if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
