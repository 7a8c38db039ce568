"""Flux's prompt encoding (ComfyUI's ``text_encoders/flux``): T5-XXL's hidden states (at least 256
tokens, no windows) as the context, CLIP-L's last layer pooled (unprojected) as the vector, and the
distilled guidance (ComfyUI's 3.5 when no FluxGuidance node sets one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from core.archs.flux.net import FLUX_DEFAULT_GUIDANCE
from core.archs.protocols import ClipTowerSpec, T5TowerSpec, TextOutput, TowerOutput, TowerSpec
from core.archs.text_base import Convention, pooled_as_is

FLUX_T5_MIN_LENGTH: Final = 256


def _combine(out: Mapping[str, TowerOutput]) -> TextOutput:
    return TextOutput(out["t5"].hidden, out["l"].pooled)


FLUX = Convention(
    "flux",
    (
        TowerSpec("clip-l", "l", "CLIP-L", ClipTowerSpec()),
        TowerSpec("t5-xxl", "t5", "T5-XXL", T5TowerSpec(FLUX_T5_MIN_LENGTH), also=("t5-base",)),
    ),
    combine_outputs=_combine,
    pooled=pooled_as_is,
    guidance=FLUX_DEFAULT_GUIDANCE,
)
CONVENTIONS = (FLUX,)
