"""A LoRA strength: a slider as wide as its card with the value over the handle, following it, and
typed there too."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QRect, QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QDoubleSpinBox,
    QLabel,
    QSizePolicy,
    QSlider,
    QStyle,
    QStyleOptionSlider,
    QWidget,
)

SCALE = 100  # slider steps per 1.0 of strength
#: a number box without arrows whose text has the whole box (the themes' padding and arrow room off)
BARE_NUMBER = (
    "QDoubleSpinBox { padding: 0px 2px; }"
    " QDoubleSpinBox::up-button, QDoubleSpinBox::down-button"
    " { subcontrol-origin: border; width: 0px; height: 0px; border: none; image: none; }"
)


class _Slider(QSlider):
    """A horizontal slider that says where its handle is (the value above it follows it)."""

    def handle_rect(self) -> QRect:
        option = QStyleOptionSlider()
        self.initStyleOption(option)
        return self.style().subControlRect(
            QStyle.ComplexControl.CC_Slider, option, QStyle.SubControl.SC_SliderHandle, self
        )


class StrengthControl(QWidget):
    """A slider as wide as the card (1 px is about 0.01 in a side panel, not 0.03) with its value
    above the handle, following it as it moves; click the value to type one (0.01 steps, arrow
    keys too). The title sits on the side away from the handle. Double-click the slider for 1.0.
    ``moved`` while dragging, ``committed`` when the value is final (slider released, arrow keys,
    a typed number, the reset)."""

    moved = Signal(float)
    committed = Signal(float)
    MIN_SLIDER = 200

    def __init__(self, lo: float, hi: float, title: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.slider = _Slider(Qt.Orientation.Horizontal, self)
        self.slider.setPageStep(5)
        self.slider.setMinimumWidth(self.MIN_SLIDER)
        self.slider.setToolTip(
            "Drag, or use the arrow keys (0.01) and Page Up/Down (0.05); double-click for 1.0"
        )
        self.slider.installEventFilter(self)
        self.title = QLabel(title, self)
        self.title.setObjectName("muted")
        self.spin = QDoubleSpinBox(self)  # the value: follows the handle, and can be typed
        self.spin.setObjectName("strengthValue")
        self.spin.setButtonSymbols(QAbstractSpinBox.ButtonSymbols.NoButtons)
        self.spin.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.spin.setDecimals(2)
        self.spin.setSingleStep(0.01)
        self.spin.setKeyboardTracking(False)
        self.spin.setToolTip(f"{title} strength: type a value (Enter), or use the arrow keys")
        self.spin.setStyleSheet(BARE_NUMBER)
        self.set_range(lo, hi)
        self.slider.valueChanged.connect(self._slider_changed)
        self.slider.rangeChanged.connect(lambda _lo, _hi: self._place())
        self.slider.sliderReleased.connect(lambda: self.committed.emit(self.value()))
        self.spin.valueChanged.connect(self._spin_changed)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def _value_width(self) -> int:
        metrics = self.spin.fontMetrics()
        return metrics.horizontalAdvance("-10.00") + 16

    def sizeHint(self) -> QSize:
        top = max(self.spin.sizeHint().height(), self.title.sizeHint().height())
        width = max(self.MIN_SLIDER, self.title.sizeHint().width() + self._value_width() + 8)
        return QSize(width, top + self.slider.sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._place()

    def _place(self) -> None:
        """The value over the handle's centre (inside the control), the title on the other side."""
        top = max(self.spin.sizeHint().height(), self.title.sizeHint().height())
        width = self.width()
        self.slider.setGeometry(0, top, width, self.height() - top)
        value_w = self._value_width()
        centre = self.slider.handle_rect().center().x()
        x = min(max(0, centre - value_w // 2), max(0, width - value_w))
        self.spin.setGeometry(x, 0, value_w, top)
        title_w = self.title.sizeHint().width()
        title_x = width - title_w if centre < width // 2 else 0
        self.title.setGeometry(title_x, 0, title_w, top)

    def value_centre(self) -> int:
        """Where the value is shown (x in the control): over the handle."""
        return self.spin.geometry().center().x()

    def handle_centre(self) -> int:
        return self.slider.geometry().x() + self.slider.handle_rect().center().x()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.slider and event.type() == QEvent.Type.MouseButtonDblClick:
            self.spin.setValue(1.0)
            return True
        return False

    def value(self) -> float:
        return round(self.spin.value(), 2)

    def set_range(self, lo: float, hi: float) -> None:
        value = self.spin.value()
        lo, hi = min(lo, value), max(hi, value)  # never clip a strength the engine holds
        self.slider.blockSignals(True)
        self.spin.blockSignals(True)
        self.slider.setRange(round(lo * SCALE), round(hi * SCALE))
        self.spin.setRange(lo, hi)
        self.slider.setValue(round(value * SCALE))
        self.slider.blockSignals(False)
        self.spin.blockSignals(False)
        self._place()

    def set_value(self, value: float) -> None:
        if self.slider.isSliderDown():
            return  # the user's hand wins over an echo from the worker
        if not self.spin.minimum() <= value <= self.spin.maximum():
            self.set_range(min(value, self.spin.minimum()), max(value, self.spin.maximum()))
        self.spin.blockSignals(True)
        self.slider.blockSignals(True)
        self.spin.setValue(value)
        self.slider.setValue(round(value * SCALE))
        self.spin.blockSignals(False)
        self.slider.blockSignals(False)
        self._place()

    def _slider_changed(self, steps: int) -> None:
        value = steps / SCALE
        self.spin.blockSignals(True)
        self.spin.setValue(value)
        self.spin.blockSignals(False)
        self._place()
        (self.moved if self.slider.isSliderDown() else self.committed).emit(value)

    def _spin_changed(self, value: float) -> None:
        self.slider.blockSignals(True)
        self.slider.setValue(round(value * SCALE))
        self.slider.blockSignals(False)
        self._place()
        self.committed.emit(round(value, 2))
