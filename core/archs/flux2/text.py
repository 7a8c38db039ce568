"""FLUX.2 klein's prompt encoding, as ComfyUI's ``text_encoders/flux`` (``KleinTokenizer``,
``Qwen3_4BModel`` / ``Qwen3_8BModel``, ``Flux2TEModel``) does it: Qwen3 (4B for klein 4B, 8B for
klein 9B) reads the prompt in its chat template with an empty thinking block, padded to 512 tokens
with ``<|endoftext|>``; the hidden states after layers 9, 18 and 27 are laid side by side per token
(``[B, 512, 3 x width]``: 7680 for 4B, 12288 for 8B). No pooled vector, no mask for the
transformer (ComfyUI's Flux models attend to the padding too, as diffusers' ``Flux2KleinPipeline``),
no distilled guidance (klein has no guidance embedder).

FLUX.2 dev reads Mistral-Small-3 24B (layers 10, 20, 30) through the Tekken tokenizer, which
Loadout does not carry yet: its record names no prompt encoding (docs/families.md)."""

from __future__ import annotations

from collections.abc import Mapping

from core.archs.llm.towers import KLEIN_4B_TOWER, KLEIN_9B_TOWER
from core.archs.protocols import TextConvention, TextOutput, TowerOutput
from core.archs.text_base import Convention


def _stacked(outputs: Mapping[str, TowerOutput]) -> TextOutput:
    out = next(iter(outputs.values()))
    return TextOutput(out.hidden, None, None)


KLEIN_4B = Convention("flux2_klein_4b", (KLEIN_4B_TOWER,), combine_outputs=_stacked)
KLEIN_9B = Convention("flux2_klein_9b", (KLEIN_9B_TOWER,), combine_outputs=_stacked)
CONVENTIONS: tuple[TextConvention, ...] = (KLEIN_4B, KLEIN_9B)
