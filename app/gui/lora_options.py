"""A LoRA card's options row: the prompt the LoRA acts on (everywhere, the positive or the
negative prompt only: ComfyUI's hook LoRA on one conditioning) and its block weights (a preset of
the loaded model's LoRA-block-weight table, or typed numbers, as A1111's ``lbw=``). A change is
sent as one stack change (``LoraOptions``); the row shows what the next snapshot says."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QWidget

from core.archs.catalog import blocks_for
from core.patching.prompt_target import PROMPT_TARGETS, region_label

#: the prompt chooser's items: (label, target)
ON_CHOICES: tuple[tuple[str, str | None], ...] = (
    ("Both prompts", None),
    *((f"{t.capitalize()} prompt only", t) for t in PROMPT_TARGETS),
    *((f"Region {i + 1} only", region_label(i)) for i in range(3)),
)
NO_BLOCKS = "All blocks"


class LoraOptionsRow(QWidget):
    def __init__(self, send: Callable[[str, str | None], None]) -> None:
        super().__init__()
        self._send = send
        self.on = QComboBox()
        for label, target in ON_CHOICES:
            self.on.addItem(label, target)
        self.on.setToolTip(
            "Where the LoRA acts: on both prompts, or only while the model runs the positive (or "
            "the negative) prompt or one region's, as ComfyUI's hook LoRAs. Its text-encoder part "
            "acts on every prompt."
        )
        self.blocks = QComboBox()
        self.blocks.setEditable(True)
        self.blocks.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.blocks.setToolTip(
            "LoRA block weights: a preset, or numbers typed as the lora-block-weight extension "
            "takes them (1,0,0,1,...; the first is the text encoder)"
        )
        self.on.activated.connect(lambda _i: self._changed())
        self.blocks.activated.connect(lambda _i: self._changed())
        line = self.blocks.lineEdit()
        assert line is not None
        line.editingFinished.connect(self._changed)
        self._shown: tuple[str, str | None] = ("", None)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.on, 1)
        layout.addWidget(QLabel("Blocks"))
        layout.addWidget(self.blocks, 1)

    def block_weights(self) -> str:
        text = self.blocks.currentText().strip()
        return "" if text == NO_BLOCKS else text

    def show_options(self, family: str | None, block_weights: str, on: str | None) -> None:
        """What the stack says now; the presets are the loaded model's."""
        self._shown = (block_weights, on)
        table = blocks_for(family)
        presets = list(table.lbw.presets) if table is not None and table.lbw is not None else []
        for w in (self.on, self.blocks):
            w.blockSignals(True)
        if on is not None and self.on.findData(on) < 0:  # a region past the listed ones (a picture's)
            self.on.addItem(f"{on.capitalize()} only", on)
        self.on.setCurrentIndex(max(0, self.on.findData(on)))
        self.blocks.clear()
        self.blocks.addItems([NO_BLOCKS, *presets])
        self.blocks.setCurrentText(block_weights or NO_BLOCKS)
        self.blocks.setEnabled(bool(presets) or bool(block_weights))
        if not self.blocks.isEnabled():
            self.blocks.setToolTip("The loaded model has no LoRA block weights")
        for w in (self.on, self.blocks):
            w.blockSignals(False)

    def _changed(self) -> None:
        wanted = (self.block_weights(), self.on.currentData())
        if wanted != self._shown:
            self._shown = wanted
            self._send(*wanted)
