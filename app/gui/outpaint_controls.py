"""The Generate panel's outpainting sides: how many pixels the starting picture grows by on each
side and how far the mask fades into it (ComfyUI's ImagePadForOutpaint; core.generate.outpaint).
All sides 0: no outpainting. A view: it turns its spin boxes into an ``Outpaint``."""

from __future__ import annotations

from PySide6.QtWidgets import QGridLayout, QLabel, QSpinBox, QWidget

from core.generate.outpaint_settings import DEFAULT_FEATHERING, MAX_GROWTH, Outpaint

SIDES = ("left", "top", "right", "bottom")


def _spin(value: int, step: int) -> QSpinBox:
    box = QSpinBox(minimum=0, maximum=MAX_GROWTH, value=value, singleStep=step)
    box.setMinimumWidth(56)
    return box


class OutpaintControls(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sides = {name: _spin(0, 64) for name in SIDES}
        self.feathering = _spin(DEFAULT_FEATHERING, 8)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setVerticalSpacing(2)
        for i, name in enumerate(SIDES):
            self.sides[name].setToolTip(f"Pixels of new picture on the {name} (0: this side stays)")
            grid.addWidget(QLabel(name, objectName="muted"), i // 2, 2 * (i % 2))
            grid.addWidget(self.sides[name], i // 2, 2 * (i % 2) + 1)
        self.feathering.setToolTip("How many pixels the mask fades into the picture from the grown sides")
        grid.addWidget(QLabel("feather", objectName="muted"), 2, 0)
        grid.addWidget(self.feathering, 2, 1)

    def value(self) -> Outpaint | None:
        """The outpainting asked for; None when no side grows."""
        left, top, right, bottom = (self.sides[n].value() for n in SIDES)
        if not (left or top or right or bottom):
            return None
        return Outpaint(left, top, right, bottom, self.feathering.value())

    def set_value(self, outpaint: Outpaint | None) -> None:
        o = outpaint or Outpaint(feathering=self.feathering.value())
        for name, v in zip(SIDES, o.sides, strict=True):
            self.sides[name].setValue(v)
        self.feathering.setValue(o.feathering)
