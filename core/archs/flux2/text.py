"""FLUX.2 klein's prompt encoding, as ComfyUI's ``text_encoders/flux`` (``KleinTokenizer``,
``Qwen3_4BModel`` / ``Qwen3_8BModel``, ``Flux2TEModel``) does it: Qwen3 (4B for klein 4B, 8B for
klein 9B) reads the prompt in its chat template with an empty thinking block, padded to 512 tokens
with ``<|endoftext|>``; the hidden states after layers 9, 18 and 27 are laid side by side per token
(``[B, 512, 3 x width]``: 7680 for 4B, 12288 for 8B). No pooled vector, no mask for the
transformer (ComfyUI's Flux models attend to the padding too, as diffusers' ``Flux2KleinPipeline``),
no distilled guidance (klein has no guidance embedder).

FLUX.2 dev, as ComfyUI's ``Flux2Tokenizer`` / ``Mistral3_24BModel``: Mistral-Small-3 24B reads
``<s>`` and the prompt in Mistral's system-prompt and ``[INST]`` template (Tekken tokenizer,
weights off, no padding); the hidden states after layers 10, 20 and 30 side by side (15360 wide),
put after zeros up to 512 tokens as ComfyUI's ``Flux2`` model does with a shorter context; no mask
for the transformer; the distilled guidance 4.0 unless set (ComfyUI's template's
FluxGuidance). diffusers' ``Flux2Pipeline`` pads the prompt to 512 tokens with its chat template;
Loadout follows ComfyUI (docs/text.md)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.archs.llm.towers import FLUX2_DEV_TOWER, KLEIN_4B_TOWER, KLEIN_9B_TOWER
from core.archs.protocols import TextConvention, TextOutput, TowerOutput
from core.archs.text_base import Convention

#: ComfyUI's ``Flux2`` model pads a shorter context with zeros at the front to this many tokens
#: (``extra_conds``: before the prompt and the negative are batched)
CONTEXT_TOKENS = 512


def _stacked(outputs: Mapping[str, TowerOutput]) -> TextOutput:
    hidden = next(iter(outputs.values())).hidden
    short = CONTEXT_TOKENS - hidden.shape[1]
    if short > 0:  # dev's unpadded Mistral prompt; klein's is 512 already
        hidden = torch.cat([hidden.new_zeros(hidden.shape[0], short, hidden.shape[2]), hidden], dim=1)
    return TextOutput(hidden, None, None)


KLEIN_4B = Convention("flux2_klein_4b", (KLEIN_4B_TOWER,), combine_outputs=_stacked)
KLEIN_9B = Convention("flux2_klein_9b", (KLEIN_9B_TOWER,), combine_outputs=_stacked)
DEV = Convention("flux2_dev", (FLUX2_DEV_TOWER,), combine_outputs=_stacked, guidance=4.0)
CONVENTIONS: tuple[TextConvention, ...] = (KLEIN_4B, KLEIN_9B, DEV)
