"""Use a picture's settings: what to do to the session so that it makes that picture again.

One pure operation (:func:`plan_picture_settings`) over the picture's parameters, the loaded model,
the LoRA stack and the library: which model file to offer when the loaded one is not the
picture's (or none is loaded), which LoRAs on the stack to switch on or off and at what strengths,
which to add from the library, and which names are nowhere to be found. The window carries the
plan out and words it; the matching lives here, once.

LoRAs are matched by file name without extension (what an A1111 ``<lora:name:s>`` tag names), the
model by its file name too (A1111's ``Model:`` field), case-insensitively.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.generate.parameters import GenerationParameters
from core.library import Entry
from core.session.loras import LoraOptions, StackChange
from core.session.snapshots import LoraInfo

MAIN_KINDS = ("checkpoint", "diffusion_model")


@dataclass(frozen=True)
class PicturePlan:
    #: the library's file of the picture's model, when it is not the loaded one
    load: Path | None = None
    #: the picture's model name when the library has no file of that name
    model_missing: str = ""
    enable: tuple[str, ...] = ()  # LoRA ids on the stack to switch on
    disable: tuple[str, ...] = ()  # ... and off (the picture did not use them)
    strengths: tuple[tuple[str, float, float], ...] = ()  # id, model, clip
    #: LoRAs to add from the library (path, model, clip): once a model is loaded
    add: tuple[tuple[Path, float, float], ...] = ()
    missing: tuple[str, ...] = ()  # LoRA names the library does not have
    #: block weights and prompt targets to set (on the stack's LoRAs where they differ, on the
    #: added ones where they are not the defaults)
    options: tuple[LoraOptions, ...] = ()

    def stack_change(self) -> StackChange:
        """What the loaded model's stack does, as one session operation (``LoraControl.change``)."""
        return StackChange(self.enable, self.disable, self.strengths, self.add, self.options)


def _key(name: str) -> str:
    return name.strip().lower()


def plan_picture_settings(
    params: GenerationParameters,
    loaded: Path | None,
    stack: Sequence[LoraInfo],
    library: Sequence[Entry],
) -> PicturePlan:
    ok = [e for e in library if e.status == "ok"]
    models = {_key(e.path.stem): e.path for e in ok if e.kind in MAIN_KINDS}
    loras = {_key(e.path.stem): e.path for e in ok if e.kind == "lora"}
    load, model_missing = None, ""
    if params.model:
        found = models.get(_key(params.model))
        if found is None and (loaded is None or _key(loaded.stem) != _key(params.model)):
            model_missing = params.model
        elif found is not None and found != loaded:
            load = found
    wanted = {_key(lo.name): lo for lo in params.loras}
    enable, disable, strengths = [], [], []
    options: list[LoraOptions] = []
    on_stack = set()
    for lora in stack:
        use = wanted.get(_key(lora.path.stem))
        if use is None:
            if lora.enabled:
                disable.append(lora.id)
            continue
        on_stack.add(_key(lora.path.stem))
        if not lora.enabled:
            enable.append(lora.id)
        if (lora.model_strength, lora.clip_strength) != (use.model_strength, use.clip_strength):
            strengths.append((lora.id, use.model_strength, use.clip_strength))
        if (_key(lora.block_weights), lora.on) != (_key(use.block_weights), use.on):
            options.append(LoraOptions(lora.id, use.block_weights, use.on))
    add, missing = [], []
    for key, use in wanted.items():
        if key in on_stack:
            continue
        if key in loras:
            add.append((loras[key], use.model_strength, use.clip_strength))
            if use.block_weights or use.on:
                options.append(LoraOptions(loras[key].stem, use.block_weights, use.on))
        else:
            missing.append(use.name)
    return PicturePlan(
        load, model_missing, tuple(enable), tuple(disable), tuple(strengths), tuple(add), tuple(missing),
        tuple(options),
    )  # fmt: skip
