"""SD3's prompt encoding (ComfyUI's ``text_encoders/sd3_clip``): CLIP-L ++ CLIP-G penultimate,
zero-padded to 4096 channels, then T5 (at least 77 tokens) along tokens; pooled CLIP-L ++ CLIP-G.
Each tower is optional: a missing CLIP gives a zero pooled half (and CLIP-G alone is shifted past
CLIP-L's 768 channels); no CLIP at all gives only T5; nothing at all gives zeros."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import torch
import torch.nn.functional as F

from core.archs.protocols import ClipTowerSpec, T5TowerSpec, TextOutput, TowerOutput, TowerSpec
from core.archs.text_base import Convention, cat_channels, pooled_as_is

SD3_CONTEXT_WIDTH: Final = 4096
SD3_T5_MIN_LENGTH: Final = 77
_L_WIDTH, _G_WIDTH = 768, 1280


def _combine(out: Mapping[str, TowerOutput]) -> TextOutput:
    lg: torch.Tensor | None = None
    pooled: torch.Tensor | None = None
    if "l" in out or "g" in out:
        l_out, g_out = out.get("l"), out.get("g")
        l_pooled = l_out.pooled if l_out is not None else torch.zeros(1, _L_WIDTH)
        g_pooled = g_out.pooled if g_out is not None else torch.zeros(1, _G_WIDTH)
        if l_out is not None and g_out is not None:
            lg = cat_channels(l_out.hidden, g_out.hidden)
        elif g_out is not None:
            lg = F.pad(g_out.hidden, (_L_WIDTH, 0))
        else:
            assert l_out is not None
            lg = l_out.hidden
        assert l_pooled is not None and g_pooled is not None
        lg = F.pad(lg, (0, SD3_CONTEXT_WIDTH - lg.shape[-1]))
        pooled = torch.cat([l_pooled, g_pooled], dim=-1)
    context = lg
    if "t5" in out:
        t5 = out["t5"].hidden
        context = t5 if lg is None else torch.cat([lg, t5], dim=-2)
    if context is None:
        context = torch.zeros(1, 77, SD3_CONTEXT_WIDTH)
    return TextOutput(context, torch.zeros(1, _L_WIDTH + _G_WIDTH) if pooled is None else pooled)


SD3 = Convention(
    "sd3",
    (
        TowerSpec("clip-l", "l", "CLIP-L", ClipTowerSpec(layer=-2, norm_hidden=False), required=False),
        TowerSpec(
            "clip-g", "g", "CLIP-G",
            ClipTowerSpec(layer=-2, norm_hidden=False, projected_pooled=True, pad_with_end=False),
            required=False,
        ),
        TowerSpec(
            "t5-xxl", "t5", "T5-XXL", T5TowerSpec(SD3_T5_MIN_LENGTH), required=False, also=("t5-base",)
        ),
    ),
    combine_outputs=_combine,
    pooled=pooled_as_is,
)  # fmt: skip
CONVENTIONS = (SD3,)
