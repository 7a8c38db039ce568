"""The Generate panel's size row: the loaded family's size presets above, width × height below (fits a
narrow dock). Choosing a preset fills the boxes; typing a size selects its preset, or "custom"."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSpinBox, QVBoxLayout, QWidget

from core.values import SIDE


class SizeControls(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.presets = QComboBox()
        self.presets.currentIndexChanged.connect(self._preset_chosen)
        self.width_ = QSpinBox(
            minimum=int(SIDE.lo), maximum=int(SIDE.hi), value=512, singleStep=64, suffix=" px"
        )
        self.height_ = QSpinBox(
            minimum=int(SIDE.lo), maximum=int(SIDE.hi), value=512, singleStep=64, suffix=" px"
        )
        self.width_.valueChanged.connect(self._size_typed)
        self.height_.valueChanged.connect(self._size_typed)
        rows = QVBoxLayout(self)
        rows.setContentsMargins(0, 0, 0, 0)
        rows.addWidget(self.presets)
        pixels = QHBoxLayout()
        pixels.addWidget(self.width_, 1)
        pixels.addWidget(QLabel("×"))
        pixels.addWidget(self.height_, 1)
        rows.addLayout(pixels)
        self.presets.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.presets.setMinimumContentsLength(6)

    def set_presets(self, sizes: tuple[tuple[int, int], ...], choose_first: bool) -> None:
        """Offer ``sizes`` and "custom"; ``choose_first`` selects the first and fills the boxes."""
        self.presets.blockSignals(True)
        self.presets.clear()
        for w, h in sizes:
            self.presets.addItem(f"{w}×{h}", (w, h))
        self.presets.addItem("custom", None)
        self.presets.blockSignals(False)
        if choose_first:
            self.presets.setCurrentIndex(0)
            self._preset_chosen(0)

    def _preset_chosen(self, index: int) -> None:
        size = self.presets.itemData(index)
        if size:
            for box, value in ((self.width_, size[0]), (self.height_, size[1])):
                box.blockSignals(True)
                box.setValue(value)
                box.blockSignals(False)

    def _size_typed(self) -> None:
        """A typed size selects its preset, or "custom" when it is none of them."""
        typed = (self.width_.value(), self.height_.value())
        i = next((j for j in range(self.presets.count()) if self.presets.itemData(j) == typed), -1)
        self.presets.blockSignals(True)
        self.presets.setCurrentIndex(i if i >= 0 else self.presets.count() - 1)
        self.presets.blockSignals(False)
