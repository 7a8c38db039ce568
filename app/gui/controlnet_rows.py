"""The Generate panel's ControlNets: a short list of rows, each a ControlNet file (one of the
library's ControlNets, or any file browsed to), its hint picture, the preprocessor that makes the
hint from it (``app.gui.hint_preprocessor``: none, canny...; with the map's thumbnail and preview),
weight and start/end. Rows are
added with "+ ControlNet" and removed with their "−"; all of them go into the request, in order
(ComfyUI chains one ControlNetApplyAdvanced per row; A1111 writes them as ``ControlNet 0``,
``ControlNet 1``...). A view: it turns its widgets into ``ControlNetUse`` records, nothing runs here.

Compact on purpose: a row is three short lines, so two or three stacked ControlNets (canny + depth)
fit the Generate panel's column, which scrolls vertically when the dock is short.

With a model loaded, the combos list the library's ControlNets that fit its family first (the
engine's own rule, ``core.detect.catalog.controlnet_fits``; one of unknown family is never ruled
out), then, after a separator, the others greyed "(for sdxl)": shown, so a file is not thought
missing, but not chosen by mistake (the library's "Fits sd1" box hides the LoRAs that do not fit
in the same way). Browsing (…) still takes any file: the engine says why one does not fit."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPixmap, QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.hint_preprocessor import PreprocessorPick
from app.gui.widgets import ElidedLabel
from core.archs.catalog import controlnet_inpaints_alone, controlnet_types
from core.detect.catalog import controlnet_fits
from core.generate.workflow_request import ControlNetUse
from core.generate.workflows import ControlNetParameters
from core.preprocess import preprocessor_named

MODELS = "Models (*.safetensors *.sft *.ckpt *.pt *.pth *.bin)"
PICTURES = "Pictures (*.png *.jpg *.jpeg *.webp)"
NONE = "none"
_TOOLTIP = Qt.ItemDataRole.ToolTipRole
_AUTO = "auto"
_TYPE_TIP = (
    "A union ControlNet's control type (auto: none given, as ComfyUI's). A ControlNet of this kind "
    "that is no union net refuses a type when the picture is made"
)
_HINTLESS_TIP = (
    "Optional while inpainting: with no hint this ControlNet runs on the picture to inpaint and its "
    "mask alone (ComfyUI's Z-Image Fun ControlNet node with no image)"
)
#: library ControlNets that do not fit the loaded model, with the family each is for
Unfit = tuple[tuple[Path, str], ...]


class FilePick(QWidget):
    """A file chosen with a button, shown by name (and a small thumbnail when ``preview``: a hint
    or starting picture is recognised at a glance), cleared with ×."""

    THUMB = 28
    changed = Signal(object)  # the new path or None

    def __init__(
        self, caption: str, filters: str, parent: QWidget | None = None, *, preview: bool = False
    ) -> None:
        super().__init__(parent)
        self.caption, self.filters = caption, filters
        self.path: Path | None = None
        self.empty = NONE  # the name shown with no file
        self.thumb = QLabel()
        self.thumb.setFixedSize(self.THUMB, self.THUMB)
        self.thumb.setVisible(preview)
        self.preview = preview
        self.label = ElidedLabel(NONE)  # a long file name never widens the panel
        self.label.setObjectName("muted")
        pick = QToolButton(text="…", autoRaise=True, toolTip=caption)
        pick.clicked.connect(self._pick)
        clear = QToolButton(text="×", autoRaise=True, toolTip="Clear")
        clear.clicked.connect(lambda: self.set_path(None))
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.thumb)
        row.addWidget(self.label, 1)
        row.addWidget(pick)
        row.addWidget(clear)

    def _pick(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, self.caption, "", self.filters)
        if name:
            self.set_path(Path(name))

    def set_path(self, path: Path | None) -> None:
        self.path = path
        self.label.setText(path.name if path else self.empty)
        self.label.setToolTip(str(path) if path else "")  # after setText: the full path
        self.changed.emit(path)
        if self.preview:
            picture = QPixmap(str(path)) if path is not None else QPixmap()
            if not picture.isNull():
                side = self.THUMB
                mode = Qt.TransformationMode.SmoothTransformation
                picture = picture.scaled(side, side, Qt.AspectRatioMode.KeepAspectRatio, mode)
            self.thumb.setPixmap(picture)


class ControlNetPick(QWidget):
    """A ControlNet file: picked from the library's ControlNets (the combo) or browsed to (…)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox()
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(6)  # a long name never widens the panel (tooltip: path)
        self.combo.setSizePolicy(QSizePolicy.Policy.Ignored, self.combo.sizePolicy().verticalPolicy())
        self.combo.currentIndexChanged.connect(self._show_path)
        browse = QToolButton(text="…", autoRaise=True, toolTip="Pick a ControlNet file (SD1.5 / SDXL)")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.combo, 1)
        row.addWidget(browse)
        self.set_choices(())

    @property
    def path(self) -> Path | None:
        data = self.combo.currentData()
        return Path(str(data)) if data else None

    def set_choices(self, paths: tuple[Path, ...], unfit: Unfit = ()) -> None:
        """The library's ControlNets, then after a separator those that do not fit the loaded model
        (greyed, "(for sdxl)"); the file chosen now stays chosen (and listed) either way."""
        current = self.path
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem(NONE, "")
        for path in paths:
            self.combo.addItem(path.stem, str(path))
            self.combo.setItemData(self.combo.count() - 1, str(path), _TOOLTIP)
        if unfit:
            self.combo.insertSeparator(self.combo.count())
        for path, family in unfit:
            self.combo.addItem(f"{path.stem} (for {family})", str(path))
            i = self.combo.count() - 1
            self.combo.setItemData(
                i, f"{path}\nA ControlNet for {family}: it does not fit the loaded model", _TOOLTIP
            )
            model = self.combo.model()
            assert isinstance(model, QStandardItemModel)  # a combo's own model
            model.item(i).setEnabled(False)
        self.combo.blockSignals(False)
        self.set_path(current)

    def set_path(self, path: Path | None) -> None:
        if path is None:
            self.combo.setCurrentIndex(0)
            return
        i = self.combo.findData(str(path))
        if i < 0:  # browsed to, or read back: listed after the library's
            self.combo.addItem(path.stem, str(path))
            i = self.combo.count() - 1
            self.combo.setItemData(i, str(path), _TOOLTIP)
        self.combo.setCurrentIndex(i)
        self._show_path()

    def select_named(self, name: str) -> bool:
        """Choose the listed file whose name (without extension) is ``name``; False if none is."""
        for i in range(1, self.combo.count()):  # those that fit first
            data = self.combo.itemData(i)
            if data and Path(str(data)).stem == name:
                self.combo.setCurrentIndex(i)
                return True
        return False

    def _show_path(self) -> None:
        self.combo.setToolTip(str(self.path) if self.path else "No ControlNet: pick one or browse (…)")

    def _browse(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Pick a ControlNet (SD1.5 / SDXL)", "", MODELS)
        if name:
            self.set_path(Path(name))


def _spin(value: float, top: float = 1.0) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=0.0, maximum=top, value=value, singleStep=0.05, decimals=2)
    box.setMinimumWidth(56)  # three in a row fit a narrow dock
    return box


class ControlNetRow(QWidget):
    """One ControlNet: file, hint picture, weight, start and end."""

    remove_requested = Signal(object)  # this row

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.number = QLabel("ControlNet 0")
        self.controlnet = ControlNetPick()
        remove = QToolButton(text="−", autoRaise=True, toolTip="Remove this ControlNet")
        remove.clicked.connect(lambda: self.remove_requested.emit(self))
        self.remove_button = remove
        self.hint = FilePick("Pick the hint picture (edges, depth, pose...)", PICTURES, preview=True)
        self.pre = PreprocessorPick()
        self.hint.changed.connect(self.pre.set_picture)
        self.strength = _spin(1.0, 10.0)
        self.start, self.end = _spin(0.0), _spin(1.0)
        self.control_type = QComboBox(toolTip=_TYPE_TIP)  # a union ControlNet's type
        self.hint_optional = False
        self.type_label = QLabel("type", objectName="muted")
        numbers = QHBoxLayout()
        for label, w in (("weight", self.strength), ("start", self.start), ("end", self.end)):
            numbers.addWidget(QLabel(label, objectName="muted"))
            numbers.addWidget(w)
        numbers.addWidget(self.type_label)
        numbers.addWidget(self.control_type)
        self.set_types(())
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setVerticalSpacing(2)
        grid.addWidget(self.number, 0, 0)
        grid.addWidget(self.controlnet, 0, 1)
        grid.addWidget(remove, 0, 2)
        grid.addWidget(QLabel("Hint", objectName="muted"), 1, 0)
        grid.addWidget(self.hint, 1, 1, 1, 2)
        grid.addWidget(QLabel("Make", objectName="muted"), 2, 0)
        grid.addWidget(self.pre, 2, 1, 1, 2)
        grid.addLayout(numbers, 3, 0, 1, 3)
        grid.setColumnStretch(1, 1)

    def set_types(self, types: tuple[str, ...]) -> None:
        """The union control types the chosen file's kind offers (none: the choice is hidden); the
        type chosen now stays chosen when it is among them."""
        current = self.control_type.currentText()
        self.control_type.clear()
        self.control_type.addItems([_AUTO, *types])
        self.control_type.setCurrentText(current if current in types else _AUTO)
        self.control_type.setVisible(bool(types))
        self.type_label.setVisible(bool(types))

    @property
    def chosen_type(self) -> str | None:
        text = self.control_type.currentText()
        return None if self.control_type.isHidden() or text in ("", _AUTO) else text

    def set_hint_optional(self, optional: bool) -> None:
        """Whether the chosen file's kind may run with no hint while inpainting (Z-Image Fun 2.x:
        on the picture to inpaint and its mask alone, as ComfyUI's node with no ``image``)."""
        self.hint_optional = optional
        self.hint.empty = "none (inpaints alone)" if optional else NONE
        self.hint.setToolTip(_HINTLESS_TIP if optional else "")
        if self.hint.path is None:
            self.hint.label.setText(self.hint.empty)

    def use(self) -> ControlNetUse | None:
        """The row as the request takes it; None until both the file and the hint are chosen (the
        file alone for a kind that inpaints alone: the engine refuses it in words when nothing is
        inpainted)."""
        if self.controlnet.path is None or (self.hint.path is None and not self.hint_optional):
            return None
        return ControlNetUse(
            self.controlnet.path, self.hint.path, self.strength.value(), self.start.value(), self.end.value(),
            self.pre.name, self.chosen_type,
        )  # fmt: skip

    def show_parameters(self, p: ControlNetParameters) -> None:
        """Weight, start and end as a picture says; its file when the library has one of that name
        (else the row's own file stays only if it is that one: a picture never runs another net)."""
        self.strength.setValue(p.weight)
        self.pre.set_name(preprocessor_named(p.module))  # A1111's depth_anything_v2 is depth
        self.start.setValue(p.start)
        self.end.setValue(p.end)
        if p.control_type and self.control_type.findText(p.control_type) < 0:
            self.control_type.addItem(p.control_type)
        self.control_type.setCurrentText(p.control_type or _AUTO)
        current = self.controlnet.path
        if not self.controlnet.select_named(p.model) and (current is None or current.stem != p.model):
            self.controlnet.set_path(None)
            self.controlnet.combo.setToolTip(f"The picture used {p.model}: pick it here or browse (…)")


class ControlNetList(QWidget):
    """The ControlNet rows (at least one) and the button that adds one."""

    changed = Signal()  # a row added or removed, or a row's file or hint changed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: list[ControlNetRow] = []
        self.choices: tuple[Path, ...] = ()
        self.families: dict[Path, str | None] = {}  # each choice's family (None: not known)
        self.model_family: str | None = None  # the loaded model's: the choices that fit it first
        self.maker: object = None  # the model preprocessors' map maker (app.backend.hint_maps)
        self.column = QVBoxLayout()
        self.column.setContentsMargins(0, 0, 0, 0)
        self.column.setSpacing(6)
        self.add_button = QPushButton("+ ControlNet", toolTip="Stack another ControlNet (e.g. canny + depth)")
        self.add_button.clicked.connect(self.add_row)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addLayout(self.column)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addStretch(1)
        outer.addLayout(buttons)
        self.add_row()

    def add_row(self) -> ControlNetRow:
        row = ControlNetRow()
        row.controlnet.combo.currentIndexChanged.connect(lambda _=0, r=row: self._types_of(r))
        row.controlnet.set_choices(*self._split())
        if self.maker is not None:
            row.pre.set_maker(self.maker)
        self._types_of(row)
        row.remove_requested.connect(self.remove_row)
        row.controlnet.combo.currentIndexChanged.connect(lambda _=0: self.changed.emit())
        row.hint.changed.connect(lambda _path: self.changed.emit())
        self.rows.append(row)
        self.column.addWidget(row)
        self._renumber()
        self.changed.emit()
        return row

    def remove_row(self, row: ControlNetRow) -> None:
        """Remove ``row``; the last one left is cleared instead (the list always shows one)."""
        if len(self.rows) == 1:
            self.rows.remove(row)
            self.add_row()
        else:
            self.rows.remove(row)
        self.column.removeWidget(row)
        row.deleteLater()
        self._renumber()
        self.changed.emit()

    def _renumber(self) -> None:
        for i, row in enumerate(self.rows):  # from 0, as the PNG parameters number them (A1111's units)
            row.number.setText(f"ControlNet {i}")
            row.number.setToolTip(f'Written as "ControlNet {i}" in the picture\'s parameters')

    def set_choices(self, paths: tuple[Path, ...], families: Mapping[Path, str | None] | None = None) -> None:
        """The library's ControlNets and the family each is for (None or missing: not known)."""
        self.choices, self.families = paths, dict(families or {})
        self._offer()

    def set_map_maker(self, maker: object) -> None:
        """Every row's (and every new row's) maker of model preprocessor maps."""
        self.maker = maker
        for row in self.rows:
            row.pre.set_maker(maker)

    def set_model_family(self, family: str | None) -> None:
        """The loaded model's family (None: none loaded, every ControlNet is offered alike)."""
        if family != self.model_family:
            self.model_family = family
            self._offer()

    def _split(self) -> tuple[tuple[Path, ...], Unfit]:
        """The choices that fit the loaded model, and the others with their family."""
        model = self.model_family
        if model is None:
            return self.choices, ()
        fit = tuple(p for p in self.choices if controlnet_fits(self.families.get(p), model))
        return fit, tuple(
            (p, f) for p in self.choices if (f := self.families.get(p)) is not None and p not in fit
        )

    def _offer(self) -> None:
        fit, unfit = self._split()
        for row in self.rows:
            row.controlnet.set_choices(fit, unfit)
            self._types_of(row)
        self.changed.emit()  # a file's kind may now inpaint alone

    def _types_of(self, row: ControlNetRow) -> None:
        path = row.controlnet.path
        family = self.families.get(path) if path is not None else None
        row.set_types(controlnet_types(family) if path is not None else ())
        row.set_hint_optional(path is not None and controlnet_inpaints_alone(family))

    def uses(self) -> tuple[ControlNetUse, ...]:
        """Every complete row, top to bottom (a row missing its file, or its hint where one is needed, is
        left out)."""
        return tuple(u for u in (row.use() for row in self.rows) if u is not None)

    def show_parameters(self, nets: tuple[ControlNetParameters, ...]) -> None:
        """As many rows as the picture used ControlNets, each showing its own."""
        while len(self.rows) > max(len(nets), 1):
            self.remove_row(self.rows[-1])
        while len(self.rows) < len(nets):
            self.add_row()
        for row, p in zip(self.rows, nets, strict=False):
            row.show_parameters(p)
