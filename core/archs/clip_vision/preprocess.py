"""The picture as CLIP's vision tower reads it, as ComfyUI's ``clip_preprocess`` makes it (its
``CLIPVisionEncode`` node with ``crop="center"``, the default): the shortest side scaled to the
tower's size (224) with antialiased bicubic ``F.interpolate``, the centre crop of a square, the
values rounded to 8 bits again (``round(clip(255 x)) / 255``), then CLIP's mean and standard
deviation per channel.

transformers' ``CLIPImageProcessor`` resizes with Pillow's bicubic on 8-bit pixels instead; the
two differ by a few 1/255 on sharp pictures. Loadout follows ComfyUI.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)



def clip_preprocess(pixels: Tensor, size: int = 224) -> Tensor:
    """[B, 3, H, W] float in [0, 1] -> [B, 3, size, size] normalised, in ``pixels``' dtype."""
    if pixels.shape[-2] != size or pixels.shape[-1] != size:
        scale = size / min(pixels.shape[-2], pixels.shape[-1])
        new = (round(scale * pixels.shape[-2]), round(scale * pixels.shape[-1]))
        pixels = F.interpolate(pixels, size=new, mode="bicubic", antialias=True)
        top, left = (pixels.shape[-2] - size) // 2, (pixels.shape[-1] - size) // 2
        pixels = pixels[:, :, top : top + size, left : left + size]
    pixels = torch.clip(255.0 * pixels, 0, 255).round() / 255.0
    mean = torch.tensor(MEAN, device=pixels.device, dtype=pixels.dtype).view(3, 1, 1)
    std = torch.tensor(STD, device=pixels.device, dtype=pixels.dtype).view(3, 1, 1)
    return (pixels - mean) / std
