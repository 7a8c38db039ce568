"""Regions to conditioning entries for one latent, as ComfyUI's sampler prepares its cond lists
(``resolve_areas_and_cond_masks_multidim``, ``calculate_start_end_timesteps``,
``create_cond_with_same_area_if_none``):

* a box in pixels becomes latent cells by whole division by the family's pixels per latent cell
  (ComfyUI's ConditioningSetArea divides by 8 for every model; a family of 16 pixels per cell,
  FLUX.2, divides by 16). A latent of another size than the picture (the hires fix's second pass)
  scales the box with it: ``px * cells // pixels``. A box in fractions is
  ``max(1, round(f * cells))`` for the size and ``round(f * cells)`` for the corner;
* a mask is resized to the latent (bilinear) when its size differs; "mask bounds" make its
  bounding box (at least 8 x 8 cells; 8 x 8 at the corner for an empty mask) the area;
* the step range becomes sigmas with the model's ``percent_to_sigma`` (no bound at 0 and 1);
* the sampler copies every entry with an area to the other prompt's list (ComfyUI's
  ``create_cond_with_same_area_if_none``: :func:`core.sampling.cond_entry.with_area_copies`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from core.errors import LoadoutError
from core.regions.region import Box, Region
from core.sampling.cond_entry import CondEntry, LatentArea, with_area_copies
from core.sampling.conditioning import Conditioning
from core.sampling.model_sampling import ModelSampling

#: ComfyUI's smallest mask-bounds area, in latent cells
MIN_BOUNDS = 8


def box_area(box: Box, picture: tuple[int, int], latent: tuple[int, int]) -> LatentArea:
    """``box`` of a ``picture`` (width, height) in cells of a ``latent`` (height, width)."""
    (pw, ph), (lh, lw) = picture, latent
    if box.fractions:
        return LatentArea(
            max(1, round(box.height * lh)),
            max(1, round(box.width * lw)),
            round(box.y * lh),
            round(box.x * lw),
        )
    x, y, w, h = (int(v) for v in (box.x, box.y, box.width, box.height))
    return LatentArea(h * lh // ph, w * lw // pw, y * lh // ph, x * lw // pw)


def latent_mask(mask: Tensor, latent: tuple[int, int]) -> Tensor:
    """A mask ``[H, W]`` or ``[B, H, W]`` at the latent's size ``[B, h, w]`` (bilinear, float32)."""
    m = mask.float()
    if m.ndim == 2:
        m = m.unsqueeze(0)
    if tuple(m.shape[-2:]) != tuple(latent):
        m = F.interpolate(m.unsqueeze(1), size=latent, mode="bilinear").squeeze(1)
    return m


def mask_bounds(mask: Tensor) -> LatentArea:
    """The bounding box of a latent-sized mask's non-zero cells over its batch (ComfyUI's
    ``get_mask_aabb`` of the batch's largest magnitude), at least :data:`MIN_BOUNDS` cells a side."""
    bounds = torch.amax(mask.abs(), dim=0)
    ys, xs = torch.where(bounds != 0)
    if ys.numel() == 0:
        return LatentArea(MIN_BOUNDS, MIN_BOUNDS, 0, 0)
    y0, x0 = int(ys.min()), int(xs.min())
    h, w = int(ys.max()) - y0 + 1, int(xs.max()) - x0 + 1
    return LatentArea(max(MIN_BOUNDS, h), max(MIN_BOUNDS, w), y0, x0)


def region_entry(
    region: Region,
    cond: Conditioning,
    mask: Tensor | None,
    picture: tuple[int, int],
    latent: tuple[int, int],
    sampling: ModelSampling,
) -> CondEntry:
    """One region's entry for a latent of ``latent`` (height, width) cells; ``mask`` the region's
    mask picture read (None without one), ``picture`` the settings' (width, height)."""
    box = region.box
    area = None if box is None else box_area(box, picture, latent)
    if box is not None and area is not None and (area.height < 1 or area.width < 1):
        raise LoadoutError(
            f"the region box {box.describe()} of {region.prompt!r} is smaller than one latent cell",
            why=f"the model works on a {latent[1]}x{latent[0]} latent of a {picture[0]}x{picture[1]} picture",
            fix="Make the box larger",
            code="bad_argument",
        )
    resized = None if mask is None else latent_mask(mask, latent)
    if resized is not None and region.mask_bounds:
        area = mask_bounds(resized)
    start = None if region.start == 0.0 else sampling.percent_to_sigma(region.start)
    end = None if region.end == 1.0 else sampling.percent_to_sigma(region.end)
    if resized is None:
        return CondEntry(cond, area, region.strength, sigma_start=start, sigma_end=end)
    return CondEntry(cond, area, 1.0, resized, region.strength, start, end)


def negative_copies(positive: Sequence[CondEntry]) -> tuple[CondEntry, ...]:
    """The copies of the positive's areas the sampler adds to a negative list of the prompt alone
    (:func:`core.sampling.cond_entry.with_area_copies`)."""
    return with_area_copies([CondEntry(None), *positive], [CondEntry(None)])[1][1:]
