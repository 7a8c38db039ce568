"""A depth map from a picture with a Depth Anything V2 network, as comfyui_controlnet_aux's
DepthAnythingV2Preprocessor makes it (``DepthAnythingV2.infer_image`` then its detector):

1. the picture in [0, 1] is resized with OpenCV's bicubic so that both sides are at least
   ``resolution`` (518) and multiples of 14, keeping the aspect ratio (Depth Anything's ``Resize``:
   ``lower_bound``, ``ensure_multiple_of=14``), normalized with ImageNet's mean and std, float32;
2. the network's relative depth is resized back to the picture's size (bilinear, corners aligned);
3. it is stretched to 0..255 (min to 0, max to 255) and truncated to uint8, grey in three channels.

Where Loadout differs: the map stays at the picture's size (the aux then resizes it to its
``resolution``, 512 on the short side; a ControlNet resizes the hint to the generation's size
anyway), and a flat map (max == min, which the aux divides by zero on) is black.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.preprocess.edges import _cv2

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])
MULTIPLE = 14


def _multiple(x: float, least: int) -> int:
    y = int(np.round(x / MULTIPLE) * MULTIPLE)
    return int(math.ceil(x / MULTIPLE) * MULTIPLE) if y < least else y


def input_size(height: int, width: int, resolution: int) -> tuple[int, int]:
    """(rows, cols) the network sees: Depth Anything's lower-bound resize rule."""
    scale = max(resolution / height, resolution / width)
    return _multiple(scale * height, resolution), _multiple(scale * width, resolution)


def network_input(picture: np.ndarray, resolution: int) -> torch.Tensor:
    """(H, W, 3) uint8 RGB -> (1, 3, rows, cols) float32, resized and normalized."""
    cv2 = _cv2()
    rows, cols = input_size(picture.shape[0], picture.shape[1], resolution)
    image = cv2.resize(picture / 255.0, (cols, rows), interpolation=cv2.INTER_CUBIC)
    image = (image - MEAN) / STD
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)).astype(np.float32))[None]


def to_map(depth: torch.Tensor, height: int, width: int) -> np.ndarray:
    """(rows, cols) relative depth -> the (height, width, 3) uint8 map."""
    full = F.interpolate(depth[None, None].float(), (height, width), mode="bilinear", align_corners=True)[
        0, 0
    ]
    d = full.cpu().numpy()
    low, high = float(d.min()), float(d.max())
    if not high > low:
        return np.zeros((height, width, 3), np.uint8)
    grey = ((d - low) / (high - low) * 255.0).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=2)


def depth_map(
    module: nn.Module, picture: np.ndarray, settings: Mapping[str, float], device: torch.device,
    check: Callable[[], None] = lambda: None,
) -> np.ndarray:  # fmt: skip
    """The depth map ``module`` (a Depth Anything V2 network, placed) makes of ``picture``."""
    x = network_input(picture, int(settings["resolution"])).to(device)
    check()
    with torch.inference_mode():
        depth = module(x)[0]
    check()
    return to_map(depth, picture.shape[0], picture.shape[1])
