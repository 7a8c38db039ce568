"""Regional prompting: parts of the picture drawn from their own prompts (ComfyUI's
ConditioningSetArea / SetAreaPercentage / SetMask / SetTimestepRange, combined with the prompt by
ConditioningCombine). The records (:mod:`.region`) and their resolution to the sampler's
conditioning entries for one latent (:mod:`.resolve`); the sampler weighs the entries
(:mod:`core.sampling.cond_batch`)."""

from core.regions.region import Box, Region
from core.regions.resolve import box_area, latent_mask, mask_bounds, negative_copies, region_entry

__all__ = ["Box", "Region", "box_area", "latent_mask", "mask_bounds", "negative_copies", "region_entry"]
