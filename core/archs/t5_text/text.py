"""PixArt's prompt encoding (ComfyUI's ``text_encoders/pixart_t5``): T5-XXL alone, no minimum
length, no padding, no mask, the weights taken against an all-padding window; no pooled vector.
Chroma's record names it too (ComfyUI's Chroma borrows PixArt's tokenizer)."""

from __future__ import annotations

from collections.abc import Mapping

from core.archs.protocols import T5TowerSpec, TextOutput, TowerOutput, TowerSpec
from core.archs.text_base import Convention


def _combine(out: Mapping[str, TowerOutput]) -> TextOutput:
    t5 = out["t5"]
    return TextOutput(t5.hidden, None, t5.mask)


PIXART_T5 = Convention(
    "pixart_t5",
    (TowerSpec("t5-xxl", "t5", "T5-XXL", T5TowerSpec(1, empty_is_padding=True), also=("t5-base",)),),
    combine_outputs=_combine,
)
CONVENTIONS = (PIXART_T5,)
