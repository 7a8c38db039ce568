"""The Generate panel's sweep row: which LoRA of the stack (or the first ControlNet's strength, the
first image prompt's weight, the Redux picture's strength), the strengths to compare, and what
each cell's LoRA strength sets. A view: it turns its widgets into a grid of one strength axis,
made on the loaded models (a :class:`~core.queue.session_grid.SessionGrid`; None when the sweep
is off)."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLineEdit, QVBoxLayout, QWidget

from core.queue.grid import axis_of
from core.queue.session_grid import SessionGrid

#: the sweep choice that compares strengths of the first ControlNet row (not a LoRA id)
CONTROLNET = "controlnet-strength"
#: the sweep choice that compares weights of the image prompt (IP-Adapter)
IP_ADAPTER = "ip-adapter-weight"
#: the sweep choice that compares strengths of the FLUX Redux picture
REDUX = "redux-strength"


class SweepControls(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.lora = QComboBox()
        self.lora.setToolTip(
            "Render the same seed at several strengths of one LoRA (or of the first ControlNet), side by side"
        )
        self.values = QLineEdit("0.4, 0.7, 1.0")
        self.values.setToolTip("The strengths to compare, separated by commas")
        self.target = QComboBox()
        self.target.addItem("model and text encoder", True)
        self.target.addItem("model only", False)
        self.target.setToolTip(
            "What each cell's strength sets. 'Model and text encoder' is what an A1111 <lora:name:s> tag "
            "does; 'model only' keeps the LoRA's text-encoder strength as it is on the stack."
        )
        # the panel fits a 380 px dock
        self.lora.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.lora.setMinimumContentsLength(9)
        rows = QVBoxLayout(self)
        rows.setContentsMargins(0, 0, 0, 0)
        line = QHBoxLayout()
        line.addWidget(self.lora, 1)
        line.addWidget(self.values, 1)
        rows.addLayout(line)
        rows.addWidget(self.target)
        self.set_loras(())

    def set_loras(self, loras: tuple[tuple[str, str], ...]) -> None:
        """(id, name) of the stack's LoRAs, offered for a strength sweep (off by default)."""
        current = self.lora.currentData()
        self.lora.blockSignals(True)
        self.lora.clear()
        self.lora.addItem("off", None)
        for lora_id, name in loras:
            self.lora.addItem(name, lora_id)
        self.lora.addItem("ControlNet 0 strength", CONTROLNET)
        self.lora.addItem("IP-Adapter weight", IP_ADAPTER)
        self.lora.addItem("Redux strength", REDUX)
        i = self.lora.findData(current)
        self.lora.setCurrentIndex(max(0, i))
        self.lora.blockSignals(False)

    def sweep(self) -> SessionGrid | None:
        """The sweep chosen, None when it is off (raises LoadoutError on strengths it cannot read)."""
        lora_id = self.lora.currentData()
        if not lora_id:
            return None
        if lora_id in (CONTROLNET, IP_ADAPTER, REDUX):
            return SessionGrid(axis_of(str(lora_id), self.values.text()))
        axis = "lora-strength" if self.target.currentData() else "lora-model-strength"
        return SessionGrid(axis_of(axis, self.values.text()), lora=str(lora_id))
