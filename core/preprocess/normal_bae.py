"""A normal map from a picture with the NormalBAE network (``scannet.pt``), as controlnet_aux's
NormalBaeDetector makes it (sd-webui-controlnet's ``normal_bae``; what ``control_v11p_sd15_normalbae``
was trained on):

1. the picture is resized so that its short side is ``resolution`` (512) and both sides are
   multiples of 64 (the aux's ``resize_image``: Lanczos up, area down);
2. the network sees it in [0, 1] normalized with ImageNet's mean and std (float32);
3. of its full-size prediction, the unit normal (x, y, z) (not the uncertainty channel) is mapped
   from -1..1 to 0..1 (``(n + 1) / 2``, clipped), times 255, truncated to uint8, x in red, y in
   green, z in blue (the network's channel order);
4. the map is resized back to the picture's size (linear, as the aux resizes it to its
   ``image_resolution``), so the hint is the picture's size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn

from core.preprocess import pose
from core.preprocess.edges import _cv2

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def input_size(height: int, width: int, resolution: int) -> tuple[int, int]:
    """(rows, cols) the network sees: short side ``resolution``, multiples of 64."""
    return pose.detect_size(height, width, resolution)


def network_input(small: np.ndarray) -> torch.Tensor:
    """(H, W, 3) uint8 RGB -> (1, 3, H, W) float32 in [0, 1], normalized with ImageNet's mean and std."""
    x = (torch.from_numpy(np.ascontiguousarray(small)).float() / 255.0).permute(2, 0, 1)[None]
    mean = torch.tensor(MEAN, dtype=torch.float32).view(-1, 1, 1)
    std = torch.tensor(STD, dtype=torch.float32).view(-1, 1, 1)
    return ((x - mean) / std).contiguous()


def to_map(prediction: torch.Tensor) -> np.ndarray:
    """(1, 4, H, W) prediction -> the (H, W, 3) uint8 map of its normal."""
    normal = ((prediction[0, :3].float() + 1) * 0.5).clip(0, 1)
    values = normal.permute(1, 2, 0).cpu().numpy()
    out: np.ndarray = (values * 255.0).clip(0, 255).astype(np.uint8)
    return out


def normal_map(
    module: nn.Module, picture: np.ndarray, settings: Mapping[str, float], device: torch.device,
    check: Callable[[], None] = lambda: None,
) -> np.ndarray:  # fmt: skip
    """The normal map ``module`` (a NormalBAE network, placed) makes of an RGB ``picture``."""
    small = pose.resized(picture, int(settings["resolution"]))
    x = network_input(small).to(device)
    check()
    with torch.inference_mode():
        prediction = module(x)
    check()
    found = to_map(prediction)
    if found.shape[:2] == picture.shape[:2]:
        return found
    cv2 = _cv2()
    out: np.ndarray = cv2.resize(found, (picture.shape[1], picture.shape[0]), interpolation=cv2.INTER_LINEAR)
    return out
