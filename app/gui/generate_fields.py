"""The Generate panel's fields kept across a relaunch: what the artist typed and chose, as a plain
dict for the settings store, and put back (values out of a field's range are left out); and the
seed row those fields include."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLineEdit, QSpinBox, QToolButton

from app.gui.theme import set_icon
from core.generate.request import MAX_SEED
from core.values import CLIP_SKIP

if TYPE_CHECKING:
    from app.gui.generate_panel import GeneratePanel


def fields(panel: GeneratePanel) -> dict[str, object]:
    return {
        "prompt": panel.prompt.toPlainText(), "negative": panel.negative.toPlainText(),
        "seed": panel.seed.text(), "random": panel.random_seed.isChecked(), "batch": panel.batch.value(),
        "steps": panel.steps.value(), "cfg": panel.cfg.value(), "guidance": panel.guidance.value(),
        "sampler": panel.sampler.currentData(), "scheduler": panel.scheduler.currentData(),
        "width": panel.width_.value(), "height": panel.height_.value(), "family": panel.family,
        "clip_skip": panel.clip_skip.value(),
        "guidance_patches": panel.guidance_patches.saved(), "lora_schedules": panel.lora_schedules.saved(),
        "regions": panel.regions.saved(), "references": panel.references.saved(),
        "reference_own_size": panel.references.own_size.isChecked(),
        "control_picture": panel.control_picture.saved(),
    }  # fmt: skip


def restore(panel: GeneratePanel, saved: dict[str, object]) -> dict[str, object] | None:
    """Put saved :func:`fields` back. Returns them when they name a family: the settings a family's
    defaults replace (steps, CFG, sampler, scheduler, size) are put back again when that family's
    model is loaded (:func:`apply_settings`)."""
    text = {k: v for k, v in saved.items() if isinstance(v, str)}
    panel.prompt.setPlainText(text.get("prompt", ""))
    panel.negative.setPlainText(text.get("negative", ""))
    if text.get("seed", "").isdigit():
        panel.seed.setText(text["seed"])
    panel.random_seed.setChecked(saved.get("random") is True)
    panel.guidance_patches.restore(text.get("guidance_patches", ""))
    panel.lora_schedules.restore(text.get("lora_schedules", ""))
    panel.regions.restore(text.get("regions", ""))
    panel.references.restore(saved.get("references"))
    panel.references.own_size.setChecked(saved.get("reference_own_size") is True)
    panel.control_picture.restore(saved.get("control_picture"))
    apply_settings(panel, saved)
    return saved if isinstance(saved.get("family"), str) else None


def apply_settings(panel: GeneratePanel, saved: dict[str, object]) -> None:
    for box, key in ((panel.batch, "batch"), (panel.steps, "steps"), (panel.width_, "width"),
                     (panel.height_, "height"), (panel.clip_skip, "clip_skip")):  # fmt: skip
        value = saved.get(key)
        if isinstance(value, int) and box.minimum() <= value <= box.maximum():
            box.setValue(value)
    for dbox, key in ((panel.cfg, "cfg"), (panel.guidance, "guidance")):
        number = saved.get(key)
        if isinstance(number, int | float) and dbox.minimum() <= number <= dbox.maximum():
            dbox.setValue(float(number))
    for combo, key in ((panel.sampler, "sampler"), (panel.scheduler, "scheduler")):
        i = combo.findData(saved.get(key))
        if i >= 0:
            combo.setCurrentIndex(i)


def clip_skip_box() -> QSpinBox:
    """A1111's clip skip; 0 shows "model's own" (the family's layer: SD1 last, SD2/SDXL penultimate)."""
    box = QSpinBox(minimum=0, maximum=int(CLIP_SKIP.hi), value=0)
    box.setSpecialValueText("model's own")
    box.setToolTip(
        "Clip skip as A1111 counts it: 1 the last CLIP layer, 2 the penultimate (anime and Pony "
        "models expect 2). SDXL already takes the penultimate layer."
    )
    return box


def clip_skip(panel: GeneratePanel) -> int | None:
    value = panel.clip_skip.value()
    return value if value > 0 else None


def seed_row(panel: GeneratePanel) -> QHBoxLayout:
    """The seed field, a new random seed, the last picture's seed, and "random" every time."""
    panel.seed = QLineEdit("0")
    panel.seed.setInputMask("")
    panel.seed.setToolTip(f"0 … {MAX_SEED}; the same seed and settings give the same picture as ComfyUI")
    panel.random_seed = QCheckBox("random")
    panel.random_seed.setToolTip("Draw a new seed for every Generate")
    dice = QToolButton(autoRaise=True, toolTip="New random seed")
    set_icon(dice, "dice")
    dice.clicked.connect(panel.new_seed)
    reuse = QToolButton(autoRaise=True, toolTip="Reuse the last picture's seed")
    set_icon(reuse, "reuse")
    reuse.clicked.connect(panel.reuse_seed)
    panel.reuse_button = reuse
    row = QHBoxLayout()
    for w in (panel.seed, dice, reuse, panel.random_seed):
        row.addWidget(w)
    return row
