"""The Generate panel's fields filled from a picture's parameters (a dropped PNG, "use these
settings"); a prompt is cut at :data:`PROMPT_CHARS` so a megabyte single line cannot freeze it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.generate.control_picture import control_picture_in

if TYPE_CHECKING:
    from app.gui.generate_panel import GeneratePanel
    from core.generate.parameters import GenerationParameters

#: the most characters of a prompt read from a picture (real prompts are a few hundred; CLIP reads 77
#: tokens per chunk): more is cut, and the status line says so
PROMPT_CHARS = 20_000


def apply_parameters(self: GeneratePanel, p: GenerationParameters) -> None:
    """Fill the fields from a picture's parameters. Values the reader ignored (out of range, not
    numbers: ``p.ignored``) leave their field as it is, and the status line names them."""
    skip = dict(p.ignored)
    for field, edit, text in (
        ("Prompt", self.prompt, p.prompt),
        ("Negative prompt", self.negative, p.negative),
    ):
        # a text field lays a single line of a megabyte out for minutes: a picture's prompt is cut
        if len(text) > PROMPT_CHARS:
            skip[field] = f"{len(text):,} characters; the first {PROMPT_CHARS:,} were kept"
            text = text[:PROMPT_CHARS]
        edit.setPlainText(text)
    if "Seed" not in skip:
        self.seed.setText(str(p.seed))
        self.random_seed.setChecked(False)
    if "Steps" not in skip:
        self.steps.setValue(p.steps)
    if "CFG scale" not in skip:
        self.cfg.setValue(p.cfg)
    if p.guidance is not None:
        self.guidance.setValue(p.guidance)
    for combo, value in ((self.sampler, p.sampler), (self.scheduler, p.scheduler)):
        i = combo.findData(value)
        if i >= 0:
            combo.setCurrentIndex(i)
    if "Size" not in skip:
        self.width_.setValue(p.width)
        self.height_.setValue(p.height)
    if "Clip skip" not in skip:
        self.clip_skip.setValue(p.clip_skip or 0)
    self.hires.apply(p.hires)
    self.workflows.apply_parameters(p)
    self.references.show_parameters(p.extra)
    self.control_picture.show_parameters(control_picture_in(p.extra))
    self.guidance_patches.apply_parameters(p)
    self.lora_schedules.apply_parameters(p)
    self.regions.apply_parameters(p)
    loras = ", ".join(f"{lo.name} {lo.model_strength:g}" for lo in p.loras)
    embeddings = ", ".join(e.name for e in p.embeddings)
    ignored = "; ".join(
        f"{key} cut ({why})" if key in ("Prompt", "Negative prompt") else f"{key} ignored ({why.rstrip('.')})"
        for key, why in skip.items()
    )
    self.status.setText(
        f"Settings read from a picture{f' (model {p.model})' if p.model else ''}"
        f"{f'; it used LoRAs: {loras}' if loras else ''}"
        f"{f'; embeddings: {embeddings}' if embeddings else ''}.{f' {ignored}.' if ignored else ''}"
    )
