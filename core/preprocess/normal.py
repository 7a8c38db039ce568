"""A normal map from a picture's depth (Depth Anything V2, :mod:`core.preprocess.depth`), by the
method controlnet_aux's MidasDetector uses for its normal map (``depth_and_normal``; ControlNet's
``normal_midas``):

1. the relative depth (near is larger) at the picture's size, as the depth map is made but not
   quantized;
2. its horizontal and vertical gradients (OpenCV's 3x3 Sobel, float32), zero where the depth,
   stretched to 0..1, is under ``background`` (0.1: the far background reads as facing the viewer);
3. the vector (d/dx, d/dy, ``strength``) (``a``, 2 pi) normalized, and mapped from -1..1 to 0..255.

Convention: red is the normal's leftward part, green its upward part, blue its part toward the
viewer (a surface facing the viewer is (127, 127, 255)): the convention ControlNet 1.1 gives for
NormalBAE's maps, which ``control_v11p_sd15_normalbae`` was trained on ("red is left, green is top,
blue is front"). The
aux's MiDaS map is the same vector with its channels in the opposite order (blue left, red front:
what ControlNet 1.0's ``control_sd15_normal`` takes); Loadout writes NormalBAE's order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.preprocess import depth
from core.preprocess.edges import _cv2

STRENGTH = 2 * math.pi
BACKGROUND = 0.1


def from_depth(
    relative: np.ndarray, strength: float = STRENGTH, background: float = BACKGROUND
) -> np.ndarray:
    """(H, W) float32 relative depth (near is larger) -> the (H, W, 3) uint8 normal map."""
    cv2 = _cv2()
    d = relative.astype(np.float32)
    stretched = torch.from_numpy(d.copy())
    stretched -= torch.min(stretched)
    peak = torch.max(stretched)
    if float(peak) > 0:
        stretched /= peak
    far = stretched.numpy() < background
    x = cv2.Sobel(d, cv2.CV_32F, 1, 0, ksize=3)
    y = cv2.Sobel(d, cv2.CV_32F, 0, 1, ksize=3)
    x[far] = 0
    y[far] = 0
    normal = np.stack([x, y, np.ones_like(x) * strength], axis=2)
    normal /= np.sum(normal**2.0, axis=2, keepdims=True) ** 0.5
    out: np.ndarray = (normal * 127.5 + 127.5).clip(0, 255).astype(np.uint8)
    return out


def normal_map(
    module: nn.Module, picture: np.ndarray, settings: Mapping[str, float], device: torch.device,
    check: Callable[[], None] = lambda: None,
) -> np.ndarray:  # fmt: skip
    """The normal map of ``picture`` from the depth ``module`` (a Depth Anything V2 network, placed)
    makes."""
    x = depth.network_input(picture, int(settings["resolution"])).to(device)
    check()
    with torch.inference_mode():
        relative = module(x)[0]
    check()
    size = picture.shape[:2]
    full = F.interpolate(relative[None, None].float(), size, mode="bilinear", align_corners=True)[0, 0]
    return from_depth(full.cpu().numpy(), float(settings["strength"]), float(settings["background"]))
