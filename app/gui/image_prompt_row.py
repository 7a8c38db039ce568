"""The Generate panel's image prompt (IP-Adapter, SD1.5/SDXL): the adapter file, the picture (a
thumbnail), its weight and the part of the steps it acts on, its weight type (a combo; the
style and composition types show a composition picture and weight, the precise types a boost),
"Mad Scientist" layer weights (a line: ``3:2.5, 6:1``), the embeds scaling (a combo) and an
attention mask (a file, or painted in the mask editor over a blank square: it is stretched to the
picture). A view: it turns the row into ``ImageSettings.ip_adapters``; core finds the image
encoder (in the library, ComfyUI's models/clip_vision or beside the adapter) and says in words
when it is missing. Below it, FLUX Redux (FLUX.1): the style model file, its picture, its
strength and how the strength acts (``ImageSettings.redux``; ComfyUI's StyleModelApply:
"multiply" scales the picture's tokens, "attn_bias" reweights the attention on them by
log(strength))."""

from __future__ import annotations

from PySide6.QtGui import QColor, QImage
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QToolButton,
    QWidget,
)

from app.gui.controlnet_rows import MODELS, PICTURES, FilePick
from app.gui.mask_editor import MaskEditor, mask_folder
from core.generate.image_prompts import IpAdapterParameters
from core.generate.ip_embeds import EMBEDS_SCALINGS
from core.generate.ip_weights import (
    COMPOSITION_TYPES,
    PRECISE_TYPES,
    WEIGHT_TYPES,
    parse_layer_weights,
    show_layer_weights,
)
from core.generate.redux import ReduxParameters
from core.generate.workflow_request import STRENGTH_TYPES, IpAdapterUse, ReduxUse
from core.values import IP_ADAPTER_BOOST, IP_ADAPTER_PERCENT, IP_ADAPTER_WEIGHT, REDUX_STRENGTH

#: the blank square an image prompt's mask is painted on (stretched to the picture when used)
MASK_CANVAS = 512


def _spin(value: float, low: float, top: float, tip: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=low, maximum=top, value=value, singleStep=0.05, decimals=2, toolTip=tip)
    box.setMinimumWidth(56)
    return box


def _scaling_combo() -> QComboBox:
    box = QComboBox(
        toolTip="Embeds scaling (ComfyUI_IPAdapter_plus's): where the weight acts, on the image "
        "prompt's output (V only) or on its keys and values"
    )
    box.addItems(EMBEDS_SCALINGS)
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(10)
    return box


class ImagePromptRow(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.adapter = FilePick("Pick the IP-Adapter (ComfyUI's models/ipadapter)", MODELS)
        self.picture = FilePick("Pick the image prompt's picture", PICTURES, preview=True)
        self.weight = _spin(1.0, IP_ADAPTER_WEIGHT.lo, IP_ADAPTER_WEIGHT.hi, "Weight (0 switches it off)")
        self.start = _spin(0.0, IP_ADAPTER_PERCENT.lo, IP_ADAPTER_PERCENT.hi, "Start (0: the first step)")
        self.end = _spin(1.0, IP_ADAPTER_PERCENT.lo, IP_ADAPTER_PERCENT.hi, "End (1: the last step)")
        numbers = QHBoxLayout()
        numbers.setContentsMargins(0, 0, 0, 0)
        for label, box in (("Weight", self.weight), ("from", self.start), ("to", self.end)):
            numbers.addWidget(QLabel(label))
            numbers.addWidget(box)
        self.weight_type = QComboBox(
            toolTip="Weight type (ComfyUI_IPAdapter_plus's): where in the UNet it acts"
        )
        self.weight_type.addItems(WEIGHT_TYPES)
        # the longest names ("strong style transfer") must not widen the side column
        self.weight_type.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.weight_type.setMinimumContentsLength(10)
        self.weight_type.currentTextChanged.connect(self._show_type_rows)
        self.scaling = _scaling_combo()
        self._block_controls()
        self.mask = FilePick("Pick the image prompt's mask (white: where it acts)", PICTURES, preview=True)
        paint = QToolButton(text="Paint…", autoRaise=True, toolTip="Paint where the image prompt acts")
        paint.clicked.connect(self.paint_mask)
        shape = QHBoxLayout()
        shape.setContentsMargins(0, 0, 0, 0)
        shape.addWidget(self.mask, 1)
        shape.addWidget(paint)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        form.addRow("IP-Adapter", self.adapter)
        form.addRow("Image prompt", self.picture)
        form.addRow("", numbers)
        form.addRow("Weight type", self.weight_type)
        form.addRow("Scaling", self.scaling)
        form.addRow("Composition", self.composing)
        form.addRow("", self.boosting)
        form.addRow("Layers", self.layers)
        form.addRow("Mask", shape)
        self.form = form
        self.redux = FilePick("Pick the FLUX Redux style model (ComfyUI's models/style_models)", MODELS)
        self.redux_picture = FilePick("Pick the picture Redux reads", PICTURES, preview=True)
        tip = "Strength (multiply: 0 leaves it out; attn_bias: above 0)"
        self.redux_strength = _spin(1.0, REDUX_STRENGTH.lo, REDUX_STRENGTH.hi, tip)
        self.redux_type = QComboBox(
            toolTip="How the strength acts (ComfyUI's strength type): multiply scales the picture's "
            "tokens; attn_bias keeps them and reweights the attention on them by log(strength)"
        )
        self.redux_type.addItems(STRENGTH_TYPES)
        strength = QHBoxLayout()
        strength.setContentsMargins(0, 0, 0, 0)
        strength.addWidget(self.redux_strength)
        strength.addWidget(self.redux_type, 1)
        form.addRow("FLUX Redux", self.redux)
        form.addRow("Redux picture", self.redux_picture)
        form.addRow("Strength", strength)
        self._show_type_rows(self.weight_type.currentText())

    def _block_controls(self) -> None:
        """The composition picture and weight, the boost and the layer weights (the block types')."""
        self.composition = FilePick(
            "Pick the composition picture (SDXL; none: the image prompt's)", PICTURES, preview=True
        )
        self.composition_weight = _spin(
            1.0, IP_ADAPTER_WEIGHT.lo, IP_ADAPTER_WEIGHT.hi, "Weight of the composition blocks"
        )
        composing = QHBoxLayout()
        composing.setContentsMargins(0, 0, 0, 0)
        composing.addWidget(self.composition, 1)
        composing.addWidget(self.composition_weight)
        self.composing = QWidget()
        self.composing.setLayout(composing)
        self.boosted = QCheckBox(
            "Boost", toolTip="The precise types' style/composition boost (off: as the weight)"
        )
        self.boost = _spin(1.0, IP_ADAPTER_BOOST.lo, IP_ADAPTER_BOOST.hi, "Boost")
        self.boost.setEnabled(False)
        self.boosted.toggled.connect(self.boost.setEnabled)
        boosting = QHBoxLayout()
        boosting.setContentsMargins(0, 0, 0, 0)
        boosting.addWidget(self.boosted)
        boosting.addWidget(self.boost)
        boosting.addStretch(1)
        self.boosting = QWidget()
        self.boosting.setLayout(boosting)
        self.layers = QLineEdit(
            placeholderText="e.g. 3:2.5, 6:1",
            toolTip="Layer weights (the node pack's Mad Scientist): transformer index:factor, ...; "
            "they replace the weight type unless it is a precise one",
        )

    def _show_type_rows(self, weight_type: str) -> None:
        """The composition row for the style and composition types, the boost for the precise ones."""
        self.form.setRowVisible(self.composing, weight_type in COMPOSITION_TYPES)
        self.form.setRowVisible(self.boosting, weight_type in PRECISE_TYPES)

    def paint_mask(self) -> None:
        """Paint the mask over a blank square; it is kept in Loadout's data folder."""
        blank = QImage(MASK_CANVAS, MASK_CANVAS, QImage.Format.Format_RGB32)
        blank.fill(QColor(96, 96, 96))
        editor = MaskEditor(blank, self, what="the image prompt acts on")
        if editor.exec():
            self.mask.set_path(editor.save(mask_folder() / "image-prompt-mask.png"))

    def uses(self) -> tuple[IpAdapterUse, ...]:
        """The image prompt when both files are picked (start and end in order)."""
        if self.adapter.path is None or self.picture.path is None:
            return ()
        start, end = sorted((self.start.value(), self.end.value()))
        weight_type = self.weight_type.currentText()
        composing, precise = weight_type in COMPOSITION_TYPES, weight_type in PRECISE_TYPES
        layers = self.layers.text().strip()
        use = IpAdapterUse(
            self.adapter.path, self.picture.path, self.weight.value(), start, end, weight_type,
            self.mask.path, self.composition.path if composing else None,
            self.composition_weight.value() if composing else None,
            self.boost.value() if precise and self.boosted.isChecked() else None,
            parse_layer_weights(layers) if layers else (), self.scaling.currentText(),
        )  # fmt: skip
        return (use,)

    def redux_uses(self) -> tuple[ReduxUse, ...]:
        """The Redux picture when the style model and the picture are picked."""
        if self.redux.path is None or self.redux_picture.path is None:
            return ()
        strength, kind = self.redux_strength.value(), self.redux_type.currentText()
        return (ReduxUse(self.redux.path, self.redux_picture.path, strength, kind),)

    def show_redux(self, item: ReduxParameters) -> None:
        """A picture's Redux strength and strength type (the files are the user's to pick again)."""
        self.redux_strength.setValue(item.strength)
        if item.strength_type in STRENGTH_TYPES:
            self.redux_type.setCurrentText(item.strength_type)

    def show_parameters(self, item: IpAdapterParameters) -> None:
        """A picture's image prompt: its numbers (the files are the user's to pick again)."""
        self.weight.setValue(item.weight)
        self.start.setValue(item.start)
        self.end.setValue(item.end)
        self.composition_weight.setValue(1.0 if item.composition_weight is None else item.composition_weight)
        self.boosted.setChecked(item.boost is not None)
        if item.boost is not None:
            self.boost.setValue(item.boost)
        self.layers.setText(show_layer_weights(item.layer_weights).replace(",", ", "))
        if item.weight_type in WEIGHT_TYPES:
            self.weight_type.setCurrentText(item.weight_type)
        if item.scaling in EMBEDS_SCALINGS:
            self.scaling.setCurrentText(item.scaling)
