"""The picture as CLIP's vision tower reads it, as ComfyUI's ``clip_preprocess`` makes it (its
``CLIPVisionEncode`` node with ``crop="center"``, the default; the shared
:func:`core.archs.image_encoders.clip_preprocess`) with CLIP's mean and standard deviation.

transformers' ``CLIPImageProcessor`` resizes with Pillow's bicubic on 8-bit pixels instead; the
two differ by a few 1/255 on sharp pictures. Loadout follows ComfyUI.
"""

from __future__ import annotations

from torch import Tensor

from core.archs.image_encoders import clip_preprocess as _preprocess

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)


def clip_preprocess(pixels: Tensor, size: int = 224) -> Tensor:
    """[B, 3, H, W] float in [0, 1] -> [B, 3, size, size] normalised, in ``pixels``' dtype."""
    return _preprocess(pixels, size, MEAN, STD)
