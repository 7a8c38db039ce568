"""The passes a generation's settings ask for that need no model beyond the base's: img2img's
start (in every plan), the inpainting mask, the guidance patches, the regions and the hires fix. The
ControlNets' and the refiner's passes need loaded files and come from the session
(:mod:`core.generate.workflows`)."""

from __future__ import annotations

import numpy as np

from core.generate.guidance_pass import GuidancePass
from core.generate.hires import HiresPass
from core.generate.inpaint import MaskPass
from core.generate.outpaint import OutpaintPass
from core.generate.passes import Pass
from core.generate.regions_pass import RegionsPass
from core.generate.request import ImageSettings


def passes_for(settings: ImageSettings, init: np.ndarray | None) -> list[Pass]:
    passes: list[Pass] = []
    if settings.mask_image is not None and init is not None:
        passes.append(MaskPass(settings.mask_image))
    if settings.outpaint is not None and init is not None:
        passes.append(OutpaintPass(settings.outpaint))
    if settings.guidance_patches:
        passes.append(GuidancePass(settings.guidance_patches))
    if settings.regions:
        passes.append(RegionsPass(settings.regions))
    if settings.hires is not None:
        passes.append(HiresPass(settings.hires))
    return passes
