"""Outpainting as ComfyUI does it: ImagePadForOutpaint, then inpainting on the padded picture.

The picture grows by ``left``, ``top``, ``right`` and ``bottom`` pixels of grey (0.5); the mask is
1 (paint) over the new border and, inside the old picture, feathered towards the sides that grew:
a pixel ``d`` pixels from the nearest grown side (ComfyUI measures ``i`` from the top and left and
``height - i``, ``width - j`` from the bottom and right, so the last row is 1 from the bottom) gets
``((feathering - d) / feathering) ** 2`` where ``d < feathering``, 0 elsewhere. ComfyUI feathers only
when ``feathering * 2`` is below both sides of the picture; otherwise the old picture is all 0.

The pass (:class:`OutpaintPass`) takes the mask pass's place: its first stage pads the starting
picture, encodes it (VAEEncode) and sets the noise mask (or an inpainting model's inputs, FLUX.1
Fill's included) exactly as a mask file would (:class:`~core.generate.inpaint.SetNoiseMask`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from core.errors import LoadoutError
from core.generate.inpaint import SetNoiseMask
from core.generate.outpaint_settings import Outpaint
from core.generate.passes import Contribution, KSample, Latent, Plan, Run, StartLatent
from core.generate.request import ImageSettings

__all__ = ["Outpaint", "OutpaintPass", "feather_mask", "pad_for_outpaint"]


def feather_mask(height: int, width: int, outpaint: Outpaint) -> np.ndarray:
    """ImagePadForOutpaint's mask (float32, the padded size): 1 over the border, the feathering inside."""
    o = outpaint
    mask = np.ones((height + o.top + o.bottom, width + o.left + o.right), np.float32)
    inner = np.zeros((height, width), np.float32)
    f = o.feathering
    if f > 0 and f * 2 < height and f * 2 < width:
        i = np.arange(height, dtype=np.float64)[:, None]
        j = np.arange(width, dtype=np.float64)[None, :]
        shape = (height, width)
        d = np.minimum.reduce(
            [
                np.broadcast_to(i if o.top else float(height), shape),
                np.broadcast_to(height - i if o.bottom else float(height), shape),
                np.broadcast_to(j if o.left else float(width), shape),
                np.broadcast_to(width - j if o.right else float(width), shape),
            ]
        )
        v = (f - d) / f
        inner = np.where(d < f, v * v, 0.0).astype(np.float32)
    mask[o.top : o.top + height, o.left : o.left + width] = inner
    return mask


def pad_for_outpaint(rgb: np.ndarray, outpaint: Outpaint) -> tuple[np.ndarray, np.ndarray]:
    """The picture (H, W, 3; 0-255) padded with grey as ImagePadForOutpaint pads it (0.5: 127.5 here,
    so the padded picture is float32) and the mask (1 = paint), both at the padded size."""
    o = outpaint
    h, w = rgb.shape[0], rgb.shape[1]
    padded = np.full((h + o.top + o.bottom, w + o.left + o.right, 3), 127.5, np.float32)
    padded[o.top : o.top + h, o.left : o.left + w] = rgb[..., :3]
    return padded, feather_mask(h, w, o)


@dataclass(frozen=True)
class PadAndMask:
    """ImagePadForOutpaint -> VAEEncode -> SetLatentNoiseMask (InpaintModelConditioning for an
    inpainting model), in place of the start latent."""

    outpaint: Outpaint

    def __call__(self, latent: Latent | None, run: Run) -> Latent:
        if run.init is None:
            raise LoadoutError(
                "outpainting needs the picture it grows",
                why="outpainting paints around a starting picture",
                fix="Give the starting picture with the sides to grow",
                code="bad_argument",
            )
        run.init, mask = pad_for_outpaint(run.init, self.outpaint)
        start = StartLatent()(None, run)
        return SetNoiseMask(mask)(start, run)


@dataclass
class OutpaintPass:
    """Outpainting: the padded picture's latent with the feathered noise mask, carried by every
    later stage as the mask pass's is."""

    outpaint: Outpaint
    kind: str = "mask"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        start = next(i for i, s in enumerate(plan.stages) if isinstance(s, StartLatent))
        plan.stages[start] = PadAndMask(self.outpaint)
        first = plan.stages[start + 1] if start + 1 < len(plan.stages) else None
        if isinstance(first, KSample):  # sized by the padded picture once it is read, not the settings
            plan.stages[start + 1] = replace(first, size=None)
