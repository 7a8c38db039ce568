"""The Generate panel's workflow rows: a ControlNet with its hint, a starting picture with an
inpainting mask and denoise, and the SDXL refiner. A view: it reads files the user picks and turns
them into the ``ImageSettings`` fields core's workflows take; nothing runs here."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QWidget,
)

from app.gui.mask_editor import MaskEditor
from app.gui.widgets import ElidedLabel
from core.generate.parameters import GenerationParameters
from core.generate.request import ImageSettings
from core.generate.workflow_request import ControlNetUse, RefinerUse
from core.generate.workflows import controlnets_in

MODELS = "Models (*.safetensors *.sft *.ckpt *.pt *.pth *.bin)"
PICTURES = "Pictures (*.png *.jpg *.jpeg *.webp)"


class FilePick(QWidget):
    """A file chosen with a button, shown by name, cleared with ×."""

    def __init__(self, caption: str, filters: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption, self.filters = caption, filters
        self.path: Path | None = None
        self.label = ElidedLabel("none")  # a long file name never widens the panel
        self.label.setObjectName("muted")
        pick = QToolButton(text="…", autoRaise=True, toolTip=caption)
        pick.clicked.connect(self._pick)
        clear = QToolButton(text="×", autoRaise=True, toolTip="Clear")
        clear.clicked.connect(lambda: self.set_path(None))
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(pick)
        row.addWidget(clear)

    def _pick(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, self.caption, "", self.filters)
        if name:
            self.set_path(Path(name))

    def set_path(self, path: Path | None) -> None:
        self.path = path
        self.label.setText(path.name if path else "none")
        self.label.setToolTip(str(path) if path else "")  # after setText: the full path


def _spin(value: float, top: float = 1.0, step: float = 0.05) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=0.0, maximum=top, value=value, singleStep=step, decimals=2)
    box.setMinimumWidth(56)  # three in a row fit a narrow dock
    return box


class WorkflowControls(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("ControlNet, inpainting, refiner", parent)
        self.setCheckable(True)
        self.setChecked(False)
        self.controlnet = FilePick("Pick a ControlNet (SD1.5 / SDXL)", MODELS)
        self.hint = FilePick("Pick the hint picture (edges, depth, pose...)", PICTURES)
        self.strength = _spin(1.0, 10.0)
        self.start, self.end = _spin(0.0), _spin(1.0)
        strength_row = QHBoxLayout()
        for label, w in (("weight", self.strength), ("start", self.start), ("end", self.end)):
            strength_row.addWidget(QLabel(label, objectName="muted"))
            strength_row.addWidget(w)
        self.init = FilePick("Pick the picture to start from", PICTURES)
        self.mask = FilePick("Pick the mask (white = repaint)", PICTURES)
        paint = QToolButton(text="Paint…", autoRaise=True, toolTip="Paint the mask over the starting picture")
        paint.clicked.connect(self.paint_mask)
        mask_row = QHBoxLayout()
        mask_row.addWidget(self.mask, 1)
        mask_row.addWidget(paint)
        self.denoise = _spin(0.75)
        self.refiner = FilePick("Pick the SDXL refiner checkpoint", MODELS)
        self.switch = _spin(0.8)
        self.switch.setMinimum(0.01)
        self.switch.setMaximum(0.99)
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow docks: label above
        form.addRow("ControlNet", self.controlnet)
        form.addRow("Hint", self.hint)
        form.addRow("", strength_row)
        form.addRow("Start from", self.init)
        form.addRow("Mask", mask_row)
        form.addRow("Denoise", self.denoise)
        form.addRow("Refiner", self.refiner)
        form.addRow("Switch at", self.switch)

    def paint_mask(self) -> None:
        """Open the brush editor over the starting picture; its mask is saved beside the picture."""
        if self.init.path is None:
            self.init._pick()
        if self.init.path is None:
            return
        editor = MaskEditor(self.init.path, self)
        if editor.exec():
            self.mask.set_path(editor.save(self.init.path.with_name(self.init.path.stem + "-mask.png")))

    def apply(self, settings: ImageSettings) -> ImageSettings:
        """``settings`` with this box's workflows (unchanged when the box is off)."""
        if not self.isChecked():
            return settings
        controlnets: tuple[ControlNetUse, ...] = ()
        if self.controlnet.path is not None and self.hint.path is not None:
            controlnets = (
                ControlNetUse(
                    self.controlnet.path,
                    self.hint.path,
                    self.strength.value(),
                    self.start.value(),
                    self.end.value(),
                ),
            )
        init = self.init.path
        sampling = replace(settings.sampling, denoise=self.denoise.value()) if init else settings.sampling
        refiner = RefinerUse(self.refiner.path, self.switch.value()) if self.refiner.path else None
        return replace(
            settings, controlnets=controlnets, init_image=init, mask_image=self.mask.path if init else None,
            refiner=refiner, sampling=sampling,
        )  # fmt: skip

    def apply_parameters(self, p: GenerationParameters) -> None:
        """Restore what a picture's parameters say (the files themselves are the user's to pick)."""
        nets = controlnets_in(p.extra)
        if nets:
            self.setChecked(True)
            self.strength.setValue(nets[0].weight)
            self.start.setValue(nets[0].start)
            self.end.setValue(nets[0].end)
        if p.denoise is not None:
            self.denoise.setValue(p.denoise)
        switch = p.extra.get("Refiner switch at")
        if switch:
            try:
                self.switch.setValue(float(switch))
                self.setChecked(True)
            except ValueError:
                pass
