"""The Generate panel's hires-fix row: on/off, scale, the second pass's denoise and steps, and the
upscaler (one of ComfyUI's latent methods, or an upscale model file). A view: it holds no state
beyond its widgets and turns them into a :class:`~core.generate.hires_settings.HiresFix`."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QGridLayout,
    QLineEdit,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QWidget,
)

from core.generate.hires_settings import HiresFix
from core.generate.latent_upscale import LATENT_METHODS

MODEL = "model"  # the upscaler combo's entry for an upscale model file


class HiresControls(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.enabled = QCheckBox("on")
        self.enabled.setToolTip("A second pass at a larger size (ComfyUI's two-KSampler hires fix)")
        self.scale = QDoubleSpinBox(minimum=1.0, maximum=4.0, value=2.0, singleStep=0.25, decimals=2)
        self.scale.setPrefix("×")
        self.denoise = QDoubleSpinBox(minimum=0.05, maximum=1.0, value=0.5, singleStep=0.05, decimals=2)
        self.denoise.setToolTip("The second pass's denoise: how much of the first picture is redrawn")
        self.steps = QSpinBox(minimum=0, maximum=200, value=0)
        self.steps.setSpecialValueText("same steps")
        self.steps.setToolTip("The second pass's steps (same steps: as many as the first)")
        self.upscaler = QComboBox()
        for method in LATENT_METHODS:
            self.upscaler.addItem(f"Latent ({method})", method)
        self.upscaler.addItem("Upscale model file…", MODEL)
        self.model_path = QLineEdit(placeholderText="ESRGAN / RealESRGAN / SwinIR file")
        browse = QToolButton(text="…", autoRaise=True, toolTip="Choose an upscale model file")
        browse.clicked.connect(self._browse)
        self.browse = browse
        # narrow enough for a laptop's side column: the combo and the boxes may shrink (tooltips keep
        # the full text), so the Generate panel never scrolls sideways at 1366 x 768
        self.upscaler.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.upscaler.setMinimumContentsLength(8)
        for box in (self.scale, self.denoise):
            box.setMinimumWidth(56)
            box.setSizePolicy(QSizePolicy.Policy.Ignored, box.sizePolicy().verticalPolicy())
        self.model_path.setMinimumWidth(40)
        # the steps on their own line, beside the upscaler: "same steps" is read whole, not "sa…"
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.enabled, 0, 0)
        grid.addWidget(self.scale, 0, 1)
        grid.addWidget(self.denoise, 0, 2, 1, 2)
        grid.addWidget(self.steps, 1, 0, 1, 2)
        grid.addWidget(self.upscaler, 1, 2, 1, 2)
        grid.addWidget(self.model_path, 2, 0, 1, 3)
        grid.addWidget(browse, 2, 3)
        self.enabled.toggled.connect(self._update)
        self.upscaler.currentIndexChanged.connect(self._update)
        self._update()

    def _update(self) -> None:
        on = self.enabled.isChecked()
        for w in (self.scale, self.denoise, self.steps, self.upscaler):
            w.setEnabled(on)
        model = on and self.upscaler.currentData() == MODEL
        self.model_path.setEnabled(model)
        self.browse.setEnabled(model)

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Upscale model", "", "Upscale models (*.pth *.pt *.safetensors *.ckpt *.bin)"
        )
        if path:
            self.model_path.setText(path)

    def hires(self) -> HiresFix | None:
        """The fix asked for, or None when it is off."""
        if not self.enabled.isChecked():
            return None
        method = str(self.upscaler.currentData())
        model = Path(self.model_path.text().strip()) if method == MODEL else None
        if model is not None and not str(model).strip("."):
            model = Path("(no upscale model chosen)")  # a clear file error when it is generated
        steps = self.steps.value() or None
        return HiresFix(
            self.scale.value(), self.denoise.value(), steps, LATENT_METHODS[0] if model else method, model
        )

    def apply(self, hires: HiresFix | None) -> None:
        """Show ``hires`` (from a dropped picture's parameters; None turns the fix off)."""
        self.enabled.setChecked(hires is not None)
        if hires is None:
            return
        self.scale.setValue(hires.scale)
        self.denoise.setValue(hires.denoise)
        self.steps.setValue(hires.steps or 0)
        key = MODEL if hires.model is not None else hires.upscaler
        i = self.upscaler.findData(key)
        if i >= 0:
            self.upscaler.setCurrentIndex(i)
        if hires.model is not None:
            self.model_path.setText(str(hires.model))
