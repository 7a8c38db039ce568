"""A LoRA card's options in the real window: the prompt chooser puts the LoRA on the negative
prompt only, the block-weight box takes a preset of the loaded model's table (and a bad typed
vector is refused in words, the stack unchanged), and "Use these settings" on a picture whose tag
carries ``lbw=`` and ``on=`` puts both on the stack; the card shows what the stack says."""

from __future__ import annotations

from pathlib import Path

import torch
from PySide6.QtCore import Qt

from app.demo import DemoLibrary
from app.gui.lora_options import NO_BLOCKS
from core.generate.parameters import LoraUse
from tests.app.test_generate_window import _load
from tests.app.test_pictures import _picture
from tests.app.util import strict


def test_the_card_sets_the_prompt_and_block_weights_and_a_picture_brings_them(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    window = make_window(demo_library.folder)
    _load(qtbot, window, demo_library.checkpoint)
    with strict(qtbot, window.backend, "started", "stack_changed", "finished"):
        window.backend.add_lora(demo_library.lora, 0.8, 0.8)
    (card,) = window.lora_panel.cards.values()
    qtbot.waitUntil(card.isVisible)  # a layout shows a new card on the event loop's next turn
    row = card.options
    assert not row.isVisible()  # folded away until asked for (or set)
    qtbot.mouseClick(card.more, Qt.MouseButton.LeftButton)
    assert row.isVisible()
    assert row.on.currentData() is None and row.blocks.currentText() == NO_BLOCKS
    assert row.blocks.findText("INS") >= 0  # the SD1 table's presets

    with strict(qtbot, window.backend, "started", "stack_changed", "finished") as rec:
        row.on.setCurrentIndex(row.on.findData("negative"))
        row.on.activated.emit(row.on.currentIndex())
    assert rec.first("stack_changed").loras[0].on == "negative"
    entry = next(iter(window.backend.session.loras.stack.entries.values()))
    assert entry.on == "negative"

    with strict(qtbot, window.backend, "started", "stack_changed", "finished") as rec:
        row.blocks.setCurrentIndex(row.blocks.findText("OUTD"))
        row.blocks.activated.emit(row.blocks.currentIndex())
    assert rec.first("stack_changed").loras[0].block_weights == "OUTD"
    assert entry.block_weights is not None and entry.block_weights.text() == "OUTD"
    # the demo LoRA patches input blocks only: OUTD takes all of it off the UNet's weights
    patcher = window.backend.session.loras.stack.patchers["diffusion_model"]
    key = entry.keys["diffusion_model"][0]
    layer = patcher.model.get_submodule(key.removesuffix(".weight"))
    assert torch.equal(layer.weight, patcher.original(key))

    with strict(qtbot, window.backend, "started", "failed", "finished"):
        row.blocks.setCurrentText("1,0,1")  # 3 values: no layout of SD1 has 3 blocks
        row.blocks.lineEdit().editingFinished.emit()
    assert entry.block_weights.text() == "OUTD"  # the stack as it was

    lora = demo_library.lora.stem
    path = _picture(tmp_path / "p.png", loras=(LoraUse(lora, 0.8, 0.8, block_weights="INS", on="positive"),))
    with strict(qtbot, window.backend, "started", "stack_changed", "finished") as rec:
        window.pictures.use_settings(path)
    (info,) = rec.first("stack_changed").loras
    assert (info.block_weights, info.on) == ("INS", "positive")
    assert card.options.on.findData("region2") >= 0  # the regions' choices are listed too
    assert not torch.equal(layer.weight, patcher.original(key))  # the input blocks patched again
    card = window.lora_panel.cards[info.id]
    assert card.options.on.currentData() == "positive" and card.options.blocks.currentText() == "INS"
