"""What a LoRA's trained scale and its control picture mean for the artist, in words (the CLI
table, the window).

Core carries the numbers (:class:`core.detect.types.TrainedScale`); Qt-free, so ``loadout
inspect`` and the window say the same sentence.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.detect.types import LoraControl, TrainedScale

#: how a control LoRA reads its control picture (``LoraSummary.control``, the engine's decision)
CONTROL_WORDS: dict[LoraControl, str] = {
    "input": "a FLUX.1 control LoRA (Canny or Depth): it widens FLUX.1 [dev]'s input to read a "
    "control picture",
    "reference": "a Qwen-Image union control LoRA (DiffSynth's, recognised by its file name): it reads "
    "a control picture (canny, depth, lineart, softedge, normal or pose map) as a reference latent",
}


def _number(value: float) -> str:
    """64 -> "64", 0.5 -> "0.5", 2.8284 -> "2.83"."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _strength(value: float) -> str:
    """A strength to type: one decimal at least ("4.0", "2.83")."""
    text = _number(value)
    return text if "." in text else f"{text}.0"


def trained_scale_sentence(t: TrainedScale, *, named: bool = False) -> str:
    """ "trained at alpha 64 / rank 16 (x4.0): ComfyUI and Loadout apply it at x1 — set strength
    4.0 for the trained effect"; ``named`` adds the component (files with several)."""
    rank = f"sqrt(rank {t.rank}) (rsLoRA)" if t.rslora else f"rank {t.rank}"
    which = "text-encoder strength" if t.text_encoder else "strength"
    part = f"{t.component}: " if named and t.component else ""
    text = (
        f"{part}trained at alpha {_number(t.alpha)} / {rank} (x{_strength(t.scale)}): ComfyUI and "
        f"Loadout apply it at x1 — set {which} {_strength(t.scale)} for the trained effect"
    )
    if t.varies:
        text += " (some modules were trained at another scale)"
    if t.dora:
        text += " (a DoRA: the strength scales the whole change, so it only comes close)"
    return text


def trained_scale_text(scales: Iterable[TrainedScale]) -> str:
    """One sentence per component, joined by "; " ("" when there is nothing to say)."""
    items = tuple(scales)
    named = len(items) > 1 or any(t.text_encoder for t in items)
    return "; ".join(trained_scale_sentence(t, named=named) for t in items)


def trained_strengths(scales: Iterable[TrainedScale]) -> tuple[float | None, float | None]:
    """(model strength, text-encoder strength) that give the trained effect; None keeps one."""
    model = clip = None
    for t in scales:
        value = round(t.scale, 2)
        if t.text_encoder:
            clip = clip if clip is not None else value
        else:
            model = model if model is not None else value
    return model, clip
