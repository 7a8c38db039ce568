"""What an inpainting ControlNet gets from the generation's inpainting, as ComfyUI's templates wire
it: the mask (white = repaint) for the nets whose hint carries one (InstantX's Qwen-Image net,
Alimama's FLUX.1 net: ``MaskedHint``), and for Z-Image Fun 2.x (``MakesLatentHint`` with inpaint
inputs) the picture to inpaint too (``ZImageFunControlnet``'s ``inpaint_image`` and ``mask``): the
starting picture and the mask file, or, when outpainting, the padded picture and its feathered mask
(ComfyUI's ``ImagePadForOutpaint`` outputs wired to the node). A Fun 2.x net may then run with no
hint picture (the node's ``image`` left out); any other net without one is refused in words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from core.archs.catalog import controlnet_inpaints_alone
from core.archs.control import MakesLatentHint
from core.errors import ModelMismatchError
from core.generate.pictures import read_mask, read_picture
from core.generate.request import ImageSettings
from core.generate.workflow_request import ControlNetUse
from core.loading.controlnet import LoadedControlNet

if TYPE_CHECKING:
    from core.generate.controlnet import AppliedControlNet


def _unit(rgb: np.ndarray) -> Tensor:
    """(H, W, 3) in 0-255 -> (1, 3, H, W) float32 in [0, 1]."""
    return torch.from_numpy(np.array(rgb, dtype=np.float32)).div(255.0).permute(2, 0, 1)[None]


def inpaints(settings: ImageSettings) -> bool:
    """Whether the generation repaints part of a starting picture (a mask file, or outpainting)."""
    repaints = settings.mask_image is not None or settings.outpaint is not None
    return settings.init_image is not None and repaints


def hand_inpainting(net: AppliedControlNet, settings: ImageSettings) -> None:
    """Give an inpainting net the generation's mask (and a Fun 2.x net the picture to inpaint),
    unless it has its own."""
    if not (net.masks_hint or net.takes_inpaint) or net.mask is not None:
        return
    if settings.mask_image is not None:  # it repaints what the generation's mask repaints
        net.mask = torch.from_numpy(read_mask(settings.mask_image))[None, None]
        if net.takes_inpaint and net.inpaint is None and settings.init_image is not None:
            net.inpaint = _unit(read_picture(settings.init_image))
    elif net.takes_inpaint and settings.outpaint is not None and settings.init_image is not None:
        from core.generate.outpaint import pad_for_outpaint  # outpaint -> inpaint -> controlnet -> here

        padded, mask = pad_for_outpaint(read_picture(settings.init_image), settings.outpaint)
        net.mask, net.inpaint = torch.from_numpy(mask)[None, None], _unit(padded)


def check_hint(use: ControlNetUse, net: LoadedControlNet, settings: ImageSettings) -> None:
    """Refuse in words a ControlNet given no hint picture unless it inpaints alone (Z-Image Fun
    2.x) and the generation inpaints or outpaints: its hint is then made from the picture to
    inpaint and the mask."""
    if use.hint is not None:
        return
    module = net.module
    if not (isinstance(module, MakesLatentHint) and module.inpaint_inputs):
        alone = " (some of its kind inpaint alone: not this file)" * controlnet_inpaints_alone(net.family)
        raise ModelMismatchError(
            f"{net.path.name} was given no hint picture",
            why="this ControlNet makes its control from a hint picture" + alone,
            fix="Give it a hint picture",
            code="bad_argument",
        )
    if not inpaints(settings):
        raise ModelMismatchError(
            f"{net.path.name} was given no hint picture and the generation inpaints nothing",
            why="without a hint picture it runs on the picture to inpaint and the mask of its repainted part",
            fix="Give it a hint picture, or inpaint (a picture to start from and a mask) or outpaint",
            code="bad_argument",
        )
