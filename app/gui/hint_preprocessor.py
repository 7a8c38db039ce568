"""A ControlNet row's preprocessor: "none" (the hint picture is used as it is) or one of core's
preprocessors (canny, lineart, softedge, depth, normal, openpose, openpose_full ..., normalbae,
dwpose) that makes the hint from the picture when the generation runs. Beside the choice, a
thumbnail of the map that will be made, and "Preview…" to see it larger before Generate. The edge
preview runs the same pure function on a copy of the picture shrunk to the preview's size
(milliseconds; the generation itself makes the map at full size in the worker); a model
preprocessor's (depth, normal, the openpose ones, normalbae, dwpose) is made on the backend's worker
by the map maker (``app.backend.hint_maps.HintMaps``) and shown when it comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QComboBox, QDialog, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from core.errors import LoadoutError
from core.preprocess import PREPROCESSORS, preprocess

NONE = "none"
#: the largest side of the picture the preview map is made from
PREVIEW_SIDE = 512


def preview_map(picture: Path, name: str, side: int = PREVIEW_SIDE) -> np.ndarray:
    """The map preprocessor ``name`` makes of ``picture`` shrunk to fit ``side`` (H, W, 3 uint8)."""
    with Image.open(picture) as im:
        small = im.convert("RGB")
        small.thumbnail((side, side), Image.Resampling.LANCZOS)
        return preprocess(name, np.asarray(small))


def to_pixmap(rgb: np.ndarray) -> QPixmap:
    h, w = rgb.shape[0], rgb.shape[1]
    data = np.ascontiguousarray(rgb)
    return QPixmap.fromImage(QImage(data.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy())


class PreprocessorPick(QWidget):
    """The preprocessor combo, the map's thumbnail and its Preview… button."""

    THUMB = 40

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.picture: Path | None = None
        self.combo = QComboBox(
            toolTip="Make the hint from the picture with a preprocessor (none: use it as it is)"
        )
        # the long names (openpose_faceonly) never widen the panel: the popup shows them whole and
        # the tooltip names the one chosen
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(5)
        self.combo.addItem(NONE, "")
        for p in PREPROCESSORS.values():
            self.combo.addItem(p.name, p.name)
            self.combo.setItemData(self.combo.count() - 1, p.description, Qt.ItemDataRole.ToolTipRole)
        self.combo.currentIndexChanged.connect(self._name_tip)
        self.combo.currentIndexChanged.connect(self.refresh)
        self.thumb = QLabel()
        self.thumb.setFixedSize(self.THUMB, self.THUMB)
        self.preview_button = QToolButton(
            text="Preview…", autoRaise=True, toolTip="See the map the hint will be"
        )
        self.preview_button.clicked.connect(self.show_preview)
        self.map: np.ndarray | None = None
        #: makes a model preprocessor's map on the worker (None: no backend, no such map)
        self.maker: Any = None
        self._asked: tuple[Path, str] | None = None  # the map asked of the maker and not back yet
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        row.addWidget(self.thumb)
        row.addWidget(self.preview_button)
        self.refresh()

    def _name_tip(self) -> None:
        name = self.name
        self.combo.setToolTip(
            f"{name}: {PREPROCESSORS[name].description}" if name is not None
            else "Make the hint from the picture with a preprocessor (none: use it as it is)"
        )  # fmt: skip

    @property
    def name(self) -> str | None:
        data = self.combo.currentData()
        return str(data) if data else None

    def set_name(self, name: str | None) -> None:
        i = self.combo.findData(name or "")
        self.combo.setCurrentIndex(max(i, 0))

    def set_picture(self, picture: Path | None) -> None:
        self.picture = picture
        self.refresh()

    def set_maker(self, maker: Any) -> None:
        """The map maker of the model preprocessors (its ``made`` signal answers ``request``)."""
        self.maker = maker
        maker.made.connect(self._made)
        self.refresh()

    def refresh(self) -> None:
        """Make the map of the current picture (none without a preprocessor or a picture)."""
        self.map, self._asked = None, None
        tip = "No map: pick a picture and a preprocessor"
        name, picture = self.name, self.picture
        if name is not None and picture is not None:
            if PREPROCESSORS[name].run is None and self.maker is not None:
                self._asked = (picture, name)
                self.maker.request(self, picture, name, PREVIEW_SIDE)
                tip = f"Making the {name} map of {picture.name}…"
            else:
                try:
                    self.map = preview_map(picture, name)
                    tip = f"The {name} map of {picture.name}"
                except (LoadoutError, OSError, ValueError) as exc:
                    tip = f"No map: {exc}"
        self._show(tip)

    def _made(self, key: object, made: object) -> None:
        if key is not self or self._asked is None or self._asked != (self.picture, self.name):
            return  # another row's, or a map of a picture or preprocessor no longer chosen
        picture, name = self._asked
        self._asked = None
        if isinstance(made, np.ndarray):
            self.map = made
            self._show(f"The {name} map of {picture.name}")
        else:
            self._show(f"No map: {made}")

    def _show(self, tip: str) -> None:
        pixmap = QPixmap() if self.map is None else to_pixmap(self.map)
        if not pixmap.isNull():
            mode = Qt.TransformationMode.SmoothTransformation
            pixmap = pixmap.scaled(self.THUMB, self.THUMB, Qt.AspectRatioMode.KeepAspectRatio, mode)
        self.thumb.setPixmap(pixmap)
        self.thumb.setToolTip(tip)
        self.preview_button.setEnabled(self.map is not None)

    def preview_dialog(self) -> QDialog | None:
        """The map at the preview's size in a dialog (None when there is no map)."""
        if self.map is None or self.picture is None:
            return None
        dialog = QDialog(self, windowTitle=f"{self.name} map of {self.picture.name}")
        label = QLabel()
        label.setPixmap(to_pixmap(self.map))
        QVBoxLayout(dialog).addWidget(label)
        return dialog

    def show_preview(self) -> None:
        dialog = self.preview_dialog()
        if dialog is not None:
            dialog.exec()
