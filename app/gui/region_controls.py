"""The Generate panel's regions: a collapsible list of parts of the picture, each drawn from its own
prompt (ComfyUI's ConditioningSetArea / SetAreaPercentage with SetTimestepRange, combined with the
prompt). A row is a box (x, y, width, height in pixels, or fractions of the picture), a strength,
the part of the steps it acts on, its prompt and whether it goes with the negative prompt
("Negative": a part of the picture steered away from its prompt); rows are added and removed
with their buttons, and a row's box can be drawn on the picture's area ("Draw…",
:mod:`app.gui.region_canvas`). A region's mask can be painted ("Mask…", the inpainting brush
editor over the picture's area); the row then has no box ("mask only"; a box chosen again cuts
the mask to it). A region read from a picture or kept from the last session keeps its mask (shown
by name).
A view: the records and their checks are :mod:`core.regions`'."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.mask_editor import MaskEditor, mask_folder
from app.gui.region_canvas import BoxDialog, PixelBox
from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters
from core.generate.request import ImageSettings
from core.regions import Box, Region
from core.regions.text import regions_from_json, regions_to_json
from core.values import REGION_PERCENT, REGION_STRENGTH

PIXELS, FRACTIONS, NO_BOX = "px", "fraction", "mask only"


def _spin(lo: float, hi: float, value: float, decimals: int, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=lo, maximum=hi, decimals=decimals, value=value)
    box.setToolTip(tip)
    return box


class RegionRow(QWidget):
    """One region: box, unit, strength, start/end and prompt; a remove button."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        tips = ("left edge", "top edge", "width", "height")
        self.box = [_spin(0, 16384, v, 3, t) for v, t in zip((0, 0, 256, 256), tips, strict=True)]
        self.unit = QComboBox()
        self.unit.addItems([PIXELS, FRACTIONS, NO_BOX])
        self.unit.setToolTip(
            "pixels, fractions of the picture's width and height, or no box (its mask alone)"
        )
        self.strength = _spin(REGION_STRENGTH.lo, REGION_STRENGTH.hi, 1.0, 2, "the region's strength")
        self.start = _spin(REGION_PERCENT.lo, REGION_PERCENT.hi, 0.0, 2, "the first step it acts on (0)")
        self.end = _spin(REGION_PERCENT.lo, REGION_PERCENT.hi, 1.0, 2, "the last step it acts on (1)")
        self.prompt = QLineEdit(placeholderText="the region's prompt")
        self.paint = QPushButton("Mask…")
        self.paint.setToolTip("Paint the region's mask (white = the region) on the picture's area")
        self.draw = QPushButton("Draw…")
        self.draw.setToolTip("Draw the box on the picture's area")
        self.remove = QPushButton("Remove")
        self.negative = QCheckBox("Negative")
        self.negative.setToolTip("Combine the region with the negative prompt: steer that part away from it")
        self.mask: Path | None = None
        self.mask_bounds = False
        self.mask_label = QLabel()
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 4)
        for col, w in enumerate([*self.box, self.unit, self.strength, self.start, self.end]):
            grid.addWidget(w, 0, col)
        grid.addWidget(self.prompt, 1, 0, 1, 3)
        grid.addWidget(self.negative, 1, 3)
        grid.addWidget(self.mask_label, 1, 4)
        grid.addWidget(self.paint, 1, 5)
        grid.addWidget(self.draw, 1, 6)
        grid.addWidget(self.remove, 1, 7, 1, 2)

    def region(self) -> Region:
        """The row's record (its checks raise LoadoutError on a bad value)."""
        unit = self.unit.currentText()
        x, y, w, h = (b.value() for b in self.box)
        if unit == PIXELS:
            x, y, w, h = (round(v) for v in (x, y, w, h))
        box = None if unit == NO_BOX else Box(x, y, w, h, fractions=unit == FRACTIONS)
        return Region(
            self.prompt.text(), box, self.mask, self.strength.value(), self.mask_bounds,
            self.start.value(), self.end.value(), self.negative.isChecked(),
        )  # fmt: skip

    def pixel_box(self, size: tuple[int, int]) -> PixelBox | None:
        """The row's box in pixels of a ``size`` picture (None without one)."""
        if self.unit.currentText() == NO_BOX:
            return None
        x, y, w, h = (b.value() for b in self.box)
        if self.unit.currentText() == FRACTIONS:
            x, w = x * size[0], w * size[0]
            y, h = y * size[1], h * size[1]
        return round(x), round(y), round(w), round(h)

    def set_pixel_box(self, box: PixelBox) -> None:
        self.unit.setCurrentText(PIXELS)
        for spin, v in zip(self.box, box, strict=True):
            spin.setValue(v)

    def set_mask(self, mask: Path | None) -> None:
        self.mask = mask
        self.mask_label.setText("" if mask is None else f"mask: {mask.name}")
        self.mask_label.setToolTip("" if mask is None else str(mask))

    def show_region(self, region: Region) -> None:
        self.unit.setCurrentText(NO_BOX)
        if region.box is not None:
            b = region.box
            self.unit.setCurrentText(FRACTIONS if b.fractions else PIXELS)
            for spin, v in zip(self.box, (b.x, b.y, b.width, b.height), strict=True):
                spin.setValue(float(v))
        self.strength.setValue(region.strength)
        self.start.setValue(region.start)
        self.end.setValue(region.end)
        self.prompt.setText(region.prompt)
        self.negative.setChecked(region.negative)
        self.mask_bounds = region.mask_bounds
        self.set_mask(region.mask)


class RegionControls(QGroupBox):
    """The list, collapsed while its box is off; "Add region" adds a row."""

    def __init__(self, picture_size: Callable[[], tuple[int, int]], parent: QWidget | None = None) -> None:
        """``picture_size``: the panel's (width, height), which boxes are drawn on."""
        super().__init__("Regions", parent)
        self.picture_size = picture_size
        self.setCheckable(True)
        self.setChecked(False)
        self.setToolTip("Parts of the picture drawn from their own prompts, beside the prompt")
        self.list = QWidget()
        self.rows_layout = QVBoxLayout(self.list)
        self.rows_layout.setContentsMargins(0, 0, 0, 0)
        self.rows: list[RegionRow] = []
        self.add = QPushButton("Add region")
        self.add.clicked.connect(lambda: self.add_row())
        buttons = QHBoxLayout()
        buttons.addWidget(self.add)
        buttons.addStretch(1)
        self.rows_layout.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        self.list.setVisible(False)
        self.toggled.connect(self.list.setVisible)

    def add_row(self, region: Region | None = None) -> RegionRow:
        row = RegionRow()
        if region is not None:
            row.show_region(region)
        row.remove.clicked.connect(lambda: self.remove_row(row))
        row.draw.clicked.connect(lambda: self.draw_box(row))
        row.paint.clicked.connect(lambda: self.paint_mask(row))
        self.rows.append(row)
        self.rows_layout.insertWidget(len(self.rows) - 1, row)
        return row

    def remove_row(self, row: RegionRow) -> None:
        self.rows.remove(row)
        row.setParent(None)
        row.deleteLater()

    def box_dialog(self, row: RegionRow) -> BoxDialog:
        size = self.picture_size()
        return BoxDialog(size, [r.pixel_box(size) for r in self.rows], self.rows.index(row), self)

    def draw_box(self, row: RegionRow) -> None:
        dialog = self.box_dialog(row)
        if dialog.exec() and (box := dialog.canvas.box()) is not None:
            row.set_pixel_box(box)

    def mask_editor(self) -> MaskEditor:
        """The brush editor over a blank area of the picture's size."""
        blank = QImage(*self.picture_size(), QImage.Format.Format_RGB32)
        blank.fill(QColor(60, 60, 66))
        return MaskEditor(blank, self, what="for this region")

    def paint_mask(self, row: RegionRow) -> None:
        """Paint the row's mask; it is kept in Loadout's data folder, with the inpainting masks."""
        editor = self.mask_editor()
        if editor.exec():
            row.set_mask(editor.save(mask_folder() / f"region-{uuid.uuid4().hex[:12]}.png"))
            row.unit.setCurrentText(NO_BOX)  # ConditioningSetMask alone: the mask is the region

    def regions(self) -> tuple[Region, ...]:
        return tuple(row.region() for row in self.rows) if self.isChecked() else ()

    def apply(self, settings: ImageSettings) -> ImageSettings:
        return replace(settings, regions=self.regions())

    def apply_parameters(self, p: GenerationParameters) -> None:
        """The regions a picture was made with (none: the list is emptied and switched off)."""
        self.show_regions(p.regions)

    def show_regions(self, regions: tuple[Region, ...]) -> None:
        for row in list(self.rows):
            self.remove_row(row)
        for region in regions:
            self.add_row(region)
        self.setChecked(bool(regions))

    def saved(self) -> str:
        """The regions as JSON text (kept across a relaunch); "" when one has a bad value."""
        try:
            return regions_to_json(self.regions()) if self.isChecked() and self.rows else ""
        except LoadoutError:
            return ""

    def restore(self, text: str) -> None:
        try:
            self.show_regions(regions_from_json(text) if text else ())
        except LoadoutError:
            self.show_regions(())
