"""Z-Image's and Lumina 2's prompt encodings, as ComfyUI's ``text_encoders/z_image`` and
``text_encoders/lumina2`` do them: one decoder-LLM tower each (Qwen3-4B in its chat template;
Gemma-2-2B after Lumina 2's system prompt), the penultimate hidden state unpadded as the
context, its mask, no pooled vector. The towers' facts (template, layer, tokenizer, padding) are
the records of ``core.archs.llm.towers``."""

from __future__ import annotations

from collections.abc import Mapping

from core.archs.llm.towers import LUMINA2_TOWER, Z_IMAGE_TOWER
from core.archs.protocols import TextConvention, TextOutput, TowerOutput
from core.archs.text_base import Convention


def _llm(outputs: Mapping[str, TowerOutput]) -> TextOutput:
    out = next(iter(outputs.values()))
    return TextOutput(out.hidden, None, out.mask)


Z_IMAGE = Convention("z_image", (Z_IMAGE_TOWER,), combine_outputs=_llm)
LUMINA2 = Convention("lumina2", (LUMINA2_TOWER,), combine_outputs=_llm)
CONVENTIONS: tuple[TextConvention, ...] = (Z_IMAGE, LUMINA2)
