"""Guidance patches: ComfyUI's model patches that change how a picture is guided, each a small
frozen record of its parameters that gives the sampler's typed patches
(:mod:`core.sampling.patches`) for the model it is used on, composable in the order given.

* on the combination of the two predictions: RescaleCFG, CFG-Zero*, APG, Epsilon Scaling
  (:mod:`core.guidance.cfg_level`);
* on the UNet's forward: FreeU, FreeU_V2, Deep Shrink (:mod:`core.guidance.unet_level`);
* a second run of the network, perturbed: PAG (UNet), Skip Layer Guidance (SD3, Flux)
  (:mod:`core.guidance.perturbed`), SAG (UNet, :mod:`core.guidance.sag`).

A patch that needs a point the loaded network lacks refuses in words. Names, text and
parameters: :mod:`core.guidance.spec`.
"""

from core.guidance.base import GuidanceContext, GuidancePatch
from core.guidance.spec import PATCHES, default_patches, describe, describe_all, parse_patch, read_patches

__all__ = [
    "PATCHES",
    "GuidanceContext",
    "GuidancePatch",
    "default_patches",
    "describe",
    "describe_all",
    "parse_patch",
    "read_patches",
]
