"""The Generate panel's workflow rows: ControlNets with their hints (a short list, see
``app.gui.controlnet_rows``), an image prompt (IP-Adapter: ``app.gui.image_prompt_row``), a
starting picture with an inpainting mask or the sides to outpaint
(``app.gui.outpaint_controls``) and denoise, and the SDXL refiner. A view: it reads files the user
picks and turns them into the ``ImageSettings`` fields core's workflows take; nothing runs here.
While the box is on, :meth:`WorkflowControls.missing` names an input a chosen row cannot do without
(a ControlNet's hint, an image prompt's or Redux's picture, the picture a mask or outpainting
starts from): Generate is off until it is given (:mod:`app.gui.needed_inputs`); the rows would
otherwise be left out of the request without a word."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QToolButton, QWidget

from app.gui.controlnet_rows import MODELS, PICTURES, ControlNetList, ControlNetPick, FilePick
from app.gui.image_prompt_row import ImagePromptRow
from app.gui.mask_editor import MaskEditor, mask_folder
from app.gui.needed_inputs import Missing
from app.gui.outpaint_controls import OutpaintControls
from core.generate.image_prompts import ip_adapters_in
from core.generate.outpaint_settings import outpaint_in
from core.generate.parameters import GenerationParameters
from core.generate.redux import redux_in
from core.generate.request import ImageSettings
from core.generate.workflow_request import RefinerUse
from core.generate.workflows import controlnets_in


def _spin(value: float, top: float = 1.0, step: float = 0.05) -> QDoubleSpinBox:
    box = QDoubleSpinBox(minimum=0.0, maximum=top, value=value, singleStep=step, decimals=2)
    box.setMinimumWidth(56)  # three in a row fit a narrow dock
    return box


class WorkflowControls(QGroupBox):
    needs_changed = Signal()  # the box turned on or off, or a row's file or picture changed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("ControlNet, inpainting, refiner", parent)
        self.setCheckable(True)
        self.setChecked(False)
        self.controlnets = ControlNetList()
        self.image_prompt = ImagePromptRow()
        self.init = FilePick("Pick the picture to start from", PICTURES, preview=True)
        self.mask = FilePick("Pick the mask (white = repaint)", PICTURES, preview=True)
        paint = QToolButton(text="Paint…", autoRaise=True, toolTip="Paint the mask over the starting picture")
        paint.clicked.connect(self.paint_mask)
        mask_row = QHBoxLayout()
        mask_row.addWidget(self.mask, 1)
        mask_row.addWidget(paint)
        self.outpaint = OutpaintControls()
        self.denoise = _spin(0.75)
        self.refiner = FilePick("Pick the SDXL refiner checkpoint", MODELS)
        self.switch = _spin(0.8)
        self.switch.setMinimum(0.01)
        self.switch.setMaximum(0.99)
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # narrow docks: label above
        form.addRow(self.controlnets)  # its own labels: "ControlNet 1", "Hint", weight...
        form.addRow(self.image_prompt)  # "IP-Adapter", "Image prompt", weight, from, to
        form.addRow("Start from", self.init)
        form.addRow("Mask", mask_row)
        form.addRow("Outpaint", self.outpaint)
        form.addRow("Denoise", self.denoise)
        form.addRow("Refiner", self.refiner)
        form.addRow("Switch at", self.switch)
        self._watch_needs()

    def _watch_needs(self) -> None:
        self.toggled.connect(lambda _on: self.needs_changed.emit())
        self.controlnets.changed.connect(self.needs_changed.emit)
        prompt = self.image_prompt
        picks = (self.init, self.mask, prompt.adapter, prompt.picture, prompt.redux, prompt.redux_picture)
        for pick in picks:
            pick.changed.connect(lambda _path: self.needs_changed.emit())
        for side in self.outpaint.sides.values():
            side.valueChanged.connect(lambda _v: self.needs_changed.emit())

    def missing(self) -> Missing | None:
        """The first input a chosen row needs and does not have (None when the box is off)."""
        if not self.isChecked():
            return None
        return next((m for m in (*self._controlnets_missing(), self._pictures_missing()) if m), None)

    def _controlnets_missing(self) -> tuple[Missing | None, ...]:
        """A ControlNet chosen without its hint (one that inpaints alone: while nothing is inpainted,
        as ``core.generate.controlnet_inpaint.check_hint`` refuses it)."""
        inpainting = self.init.path is not None and (self.mask.path or self.outpaint.value()) is not None
        found: list[Missing | None] = []
        for i, row in enumerate(self.controlnets.rows):
            net = row.controlnet.path
            if net is None or row.hint.path is not None or (row.hint_optional and inpainting):
                continue
            what = f"ControlNet {i} ({net.stem}) needs a hint picture"
            if row.hint_optional:
                fix = "pick one, or inpaint: a picture to start from and a mask"
                found.append(Missing(what + " unless the generation inpaints", fix))
            else:
                found.append(Missing(what, "pick one (or a photo and a preprocessor), or choose none"))
        return tuple(found)

    def _pictures_missing(self) -> Missing | None:
        prompt = self.image_prompt
        if prompt.adapter.path is not None and prompt.picture.path is None:
            return Missing("The IP-Adapter needs its picture", "pick the image prompt, or clear the adapter")
        if prompt.redux.path is not None and prompt.redux_picture.path is None:
            return Missing("FLUX Redux needs its picture", "pick the Redux picture, or clear the style model")
        if self.init.path is None and self.mask.path is not None:
            return Missing("The mask needs a picture to start from", "pick one, or clear the mask")
        if self.init.path is None and self.outpaint.value() is not None:
            return Missing("Outpainting needs a picture to start from", "pick one, or set the sides to 0")
        return None

    # the first ControlNet row's widgets, by the names the box had when it held one ControlNet
    @property
    def controlnet(self) -> ControlNetPick:
        return self.controlnets.rows[0].controlnet

    @property
    def hint(self) -> FilePick:
        return self.controlnets.rows[0].hint

    @property
    def strength(self) -> QDoubleSpinBox:
        return self.controlnets.rows[0].strength

    @property
    def start(self) -> QDoubleSpinBox:
        return self.controlnets.rows[0].start

    @property
    def end(self) -> QDoubleSpinBox:
        return self.controlnets.rows[0].end

    def paint_mask(self) -> None:
        """Open the brush editor over the starting picture; its mask is kept in Loadout's data folder
        (not the output folder, whose Gallery shows pictures)."""
        if self.init.path is None:
            self.init._pick()
        if self.init.path is None:
            return
        editor = MaskEditor(self.init.path, self)
        if editor.exec():
            self.mask.set_path(editor.save(mask_folder() / f"{self.init.path.stem}-mask.png"))

    def apply(self, settings: ImageSettings) -> ImageSettings:
        """``settings`` with this box's workflows (unchanged when the box is off)."""
        if not self.isChecked():
            return settings
        controlnets = self.controlnets.uses()
        init = self.init.path
        sampling = replace(settings.sampling, denoise=self.denoise.value()) if init else settings.sampling
        refiner = RefinerUse(self.refiner.path, self.switch.value()) if self.refiner.path else None
        outpaint = self.outpaint.value() if init else None
        mask = self.mask.path if init and outpaint is None else None  # outpainting makes its own mask
        return replace(
            settings, controlnets=controlnets, init_image=init, mask_image=mask, outpaint=outpaint,
            refiner=refiner, sampling=sampling, ip_adapters=self.image_prompt.uses(),
            redux=self.image_prompt.redux_uses(),
        )  # fmt: skip

    def apply_parameters(self, p: GenerationParameters) -> None:
        """Restore what a picture's parameters say (the files themselves are the user's to pick)."""
        nets = controlnets_in(p.extra)
        if nets:
            self.setChecked(True)
            self.controlnets.show_parameters(nets)
        prompts = ip_adapters_in(p.extra)
        if prompts:
            self.setChecked(True)
            self.image_prompt.show_parameters(prompts[0])
        styles = redux_in(p.extra)
        if styles:
            self.setChecked(True)
            self.image_prompt.show_redux(styles[0])
        outpaint = outpaint_in(p.extra)
        if outpaint is not None:
            self.setChecked(True)
            self.outpaint.set_value(outpaint)
        if p.denoise is not None:
            self.denoise.setValue(p.denoise)
        switch = p.extra.get("Refiner switch at")
        if switch:
            try:
                self.switch.setValue(float(switch))
                self.setChecked(True)
            except ValueError:
                pass
