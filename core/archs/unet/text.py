"""The SD-family prompt encodings (ComfyUI's ``sd1_clip``, ``sd2_clip``, ``sdxl_clip``; docs/text.md):

=============  ============================================================  =====================
convention     context                                                       pooled
=============  ============================================================  =====================
sd1            CLIP-L last layer, final-normed (768)                         CLIP-L, unprojected
sd2            OpenCLIP-H penultimate, final-normed (1024)                   CLIP-H, projected
sdxl           CLIP-L penultimate ++ CLIP-G penultimate, both un-normed      CLIP-G, projected
               (768 + 1280 = 2048 channels)
sdxl_refiner   CLIP-G penultimate, un-normed (1280)                          CLIP-G, projected
=============  ============================================================  =====================

SDXL's UNet takes the pooled vector with the picture's size and crop as its ``y`` (:func:`sdxl_adm`),
the refiner's with an aesthetic score (:func:`sdxl_refiner_adm`); SD1/SD2 take none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import torch
from torch import Tensor

from core.archs.protocols import ClipTowerSpec, ExtraInputs, TextOutput, TowerOutput, TowerSpec
from core.archs.text_base import Convention, cat_channels
from core.models.attention import timestep_embedding

#: SDXL's size/crop embeddings: each number as a 256-wide sinusoidal (cos, sin) timestep embedding
SDXL_EMBED_DIM: Final = 256

_PENULTIMATE_L = ClipTowerSpec(layer=-2, norm_hidden=False, pad_with_end=True)
_PENULTIMATE_G = ClipTowerSpec(layer=-2, norm_hidden=False, projected_pooled=True, pad_with_end=False)
CLIP_G_TOWER = TowerSpec("clip-g", "g", "CLIP-G", _PENULTIMATE_G)


def sdxl_adm(
    pooled: Tensor,
    *,
    width: int,
    height: int,
    crop_w: int = 0,
    crop_h: int = 0,
    target_width: int | None = None,
    target_height: int | None = None,
) -> Tensor:
    """SDXL's (B, 2816) class vector: CLIP-G pooled ++ embeddings of height, width, crop_h, crop_w,
    target_height, target_width. ComfyUI's defaults: width/height = the image size (latent x 8),
    crops 0, targets = width/height."""
    sizes = [height, width, crop_h, crop_w, target_height or height, target_width or width]
    flat = timestep_embedding(torch.tensor(sizes, dtype=torch.float32), SDXL_EMBED_DIM).flatten()[None]
    return torch.cat([pooled.float(), flat.to(pooled.device).repeat(pooled.shape[0], 1)], dim=1)


def sdxl_refiner_adm(
    pooled: Tensor,
    *,
    width: int,
    height: int,
    crop_w: int = 0,
    crop_h: int = 0,
    negative: bool = False,
    aesthetic_score: float | None = None,
) -> Tensor:
    """The refiner's (B, 2560) vector: pooled ++ height, width, crop_h, crop_w, aesthetic score
    (ComfyUI's defaults: 6 for the positive prompt, 2.5 for the negative)."""
    score = aesthetic_score if aesthetic_score is not None else (2.5 if negative else 6.0)
    sizes = [height, width, crop_h, crop_w, score]
    flat = timestep_embedding(torch.tensor(sizes, dtype=torch.float32), SDXL_EMBED_DIM)
    flat = flat.flatten()[None].to(pooled.device)
    return torch.cat([pooled.float(), flat.repeat(pooled.shape[0], 1)], dim=1)


def _sdxl_pooled(pooled: Tensor | None, extra: ExtraInputs) -> Tensor | None:
    if not extra.adm_channels or pooled is None:
        return None
    return sdxl_adm(pooled, width=extra.width, height=extra.height)


def _refiner_pooled(pooled: Tensor | None, extra: ExtraInputs) -> Tensor | None:
    if not extra.adm_channels or pooled is None:
        return None
    return sdxl_refiner_adm(pooled, width=extra.width, height=extra.height, negative=extra.negative)


def _sdxl_combine(outputs: Mapping[str, TowerOutput]) -> TextOutput:
    l_out, g_out = outputs["l"], outputs["g"]
    return TextOutput(cat_channels(l_out.hidden, g_out.hidden), g_out.pooled)


SD1 = Convention("sd1", (TowerSpec("clip-l", "l", "CLIP-L", ClipTowerSpec()),))
SD2 = Convention(
    "sd2",
    (
        TowerSpec(
            "clip-h", "h", "OpenCLIP-H", ClipTowerSpec(-2, True, projected_pooled=True, pad_with_end=False)
        ),
    ),
)
SDXL = Convention(
    "sdxl",
    (TowerSpec("clip-l", "l", "CLIP-L", _PENULTIMATE_L), CLIP_G_TOWER),
    combine_outputs=_sdxl_combine,
    pooled=_sdxl_pooled,
)
SDXL_REFINER = Convention("sdxl_refiner", (CLIP_G_TOWER,), pooled=_refiner_pooled)
CONVENTIONS = (SD1, SD2, SDXL, SDXL_REFINER)
