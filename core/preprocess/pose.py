"""A pose map from a picture with OpenPose's body network, as controlnet_aux's OpenposeDetector
makes it (bodies only, its defaults):

1. the picture is resized so that its short side is ``resolution`` (512) and both sides are
   multiples of 64 (the aux's ``resize_image``: Lanczos up, area down);
2. the network sees it in BGR order scaled so its height is 184 px (half of 368), padded right and
   down to a multiple of 8 with grey 128, as ``x / 256 - 0.5``;
3. its heatmaps and affinity fields are resized by 8 (Lanczos, channel by channel), the padding cut
   off, and resized to the picture's size; people are found in them
   (:mod:`core.preprocess.pose_people`);
4. each person is drawn on black: the 17 limbs as ellipses 4 px thick in OpenPose's colours at 60 %,
   then the 18 parts as dots of radius 4 in full colour (the aux's ``draw_bodypose``).

Where Loadout differs: the map drawn at the resized size is resized back to the picture's size
(linear, as the aux resizes it to its ``image_resolution``), so the hint is the picture's size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from core.preprocess import pose_people
from core.preprocess.edges import _cv2

BOX = 368
SCALE = 0.5
STRIDE = 8
PAD = 128
#: OpenPose's colours of the 18 parts, and of the limbs drawn in the same order (RGB)
COLORS = ((255, 0, 0), (255, 85, 0), (255, 170, 0), (255, 255, 0), (170, 255, 0), (85, 255, 0),
          (0, 255, 0), (0, 255, 85), (0, 255, 170), (0, 255, 255), (0, 170, 255), (0, 85, 255),
          (0, 0, 255), (85, 0, 255), (170, 0, 255), (255, 0, 255), (255, 0, 170), (255, 0, 85))  # fmt: skip
DRAWN_LIMBS = 17  # the last two limbs (shoulder to ear) link people up but are not drawn
STICK = 4

#: a person: 18 parts as (x, y) in 0..1 of the picture's width and height, or None
Person = list[tuple[float, float] | None]


def detect_size(height: int, width: int, resolution: int) -> tuple[int, int]:
    """(rows, cols) the pose is found and drawn at: short side ``resolution``, multiples of 64."""
    k = resolution / min(height, width)
    return int(np.round(height * k / 64.0)) * 64, int(np.round(width * k / 64.0)) * 64


def resized(picture: np.ndarray, resolution: int) -> np.ndarray:
    """``picture`` at :func:`detect_size` (the aux's ``resize_image``: Lanczos up, area down)."""
    cv2 = _cv2()
    rows, cols = detect_size(picture.shape[0], picture.shape[1], resolution)
    k = resolution / min(picture.shape[0], picture.shape[1])
    mode = cv2.INTER_LANCZOS4 if k > 1 else cv2.INTER_AREA
    out: np.ndarray = cv2.resize(picture, (cols, rows), interpolation=mode)
    return out


def aux_scaled(x: np.ndarray, rows: float, cols: float) -> np.ndarray:
    """The aux's resize: area when shrinking, Lanczos when growing, channel by channel."""
    cv2 = _cv2()
    if x.ndim == 3 and x.shape[2] not in (1, 3):
        return np.stack([aux_scaled(x[:, :, i], rows, cols) for i in range(x.shape[2])], axis=2)
    k = (rows + cols) / (x.shape[0] + x.shape[1])
    mode = cv2.INTER_AREA if k < 1 else cv2.INTER_LANCZOS4
    out: np.ndarray = cv2.resize(x, (int(cols), int(rows)), interpolation=mode)
    return out


def _network_rows_cols(height: int, width: int) -> tuple[int, int]:
    scale = SCALE * BOX / height
    rows, cols = int(height * scale), int(width * scale)
    return rows + (-rows) % STRIDE, cols + (-cols) % STRIDE


def input_size(height: int, width: int, resolution: int) -> tuple[int, int]:
    """(rows, cols) the network sees for a picture of ``height`` x ``width``."""
    return _network_rows_cols(*detect_size(height, width, resolution))


def network_input(bgr: np.ndarray) -> tuple[torch.Tensor, tuple[int, int]]:
    """(H, W, 3) uint8 BGR -> the (1, 3, rows, cols) float32 input and the unpadded (rows, cols)."""
    scale = SCALE * BOX / bgr.shape[0]
    small = aux_scaled(bgr, bgr.shape[0] * scale, bgr.shape[1] * scale)
    rows, cols = small.shape[:2]
    padded = np.full((rows + (-rows) % STRIDE, cols + (-cols) % STRIDE, 3), PAD, np.uint8)
    padded[:rows, :cols] = small
    x = padded.astype(np.float32).transpose(2, 0, 1)[None] / 256 - 0.5
    return torch.from_numpy(np.ascontiguousarray(x)).float(), (rows, cols)


def _full_size(out: torch.Tensor, unpadded: tuple[int, int], height: int, width: int) -> np.ndarray:
    maps = out[0].float().cpu().numpy().transpose(1, 2, 0)
    maps = aux_scaled(maps, maps.shape[0] * STRIDE, maps.shape[1] * STRIDE)[: unpadded[0], : unpadded[1]]
    return aux_scaled(maps, height, width).astype(np.float64)


def people_in_pixels(
    module: nn.Module, bgr: np.ndarray, device: torch.device, check: Callable[[], None] = lambda: None
) -> list[list[tuple[float, float] | None]]:
    """The people the placed network finds in an (H, W, 3) uint8 BGR picture, their parts in its
    pixels."""
    x, unpadded = network_input(bgr)
    check()
    with torch.inference_mode():
        fields, heat = module(x.to(device))
    check()
    height, width = bgr.shape[:2]
    heatmaps = _full_size(heat, unpadded, height, width)
    affinity = _full_size(fields, unpadded, height, width)
    found = pose_people.peaks(heatmaps)
    candidates, rows = pose_people.people(found, pose_people.limbs(found, affinity, height))
    return [pose_people.keypoints(candidates, r) for r in rows]


def normalised(person: Sequence[tuple[float, float] | None], height: int, width: int) -> Person:
    return [None if p is None else (p[0] / float(width), p[1] / float(height)) for p in person]


def find_people(
    module: nn.Module, bgr: np.ndarray, device: torch.device, check: Callable[[], None] = lambda: None
) -> list[Person]:
    """The people the placed network finds in an (H, W, 3) uint8 BGR picture."""
    height, width = bgr.shape[:2]
    return [normalised(p, height, width) for p in people_in_pixels(module, bgr, device, check)]


def limb_polygon(pa: tuple[float, float], pb: tuple[float, float], width: int, height: int) -> np.ndarray:
    """The ellipse OpenPose draws a limb as, between two normalised points (x, y in 0..1) on a
    ``width`` x ``height`` canvas: STICK px thick, as a convex polygon (the aux's and DWPose's)."""
    xs = np.array([pa[0], pb[0]]) * float(width)
    ys = np.array([pa[1], pb[1]]) * float(height)
    length = ((ys[0] - ys[1]) ** 2 + (xs[0] - xs[1]) ** 2) ** 0.5
    angle = math.degrees(math.atan2(ys[0] - ys[1], xs[0] - xs[1]))
    centre = (int(np.mean(xs)), int(np.mean(ys)))
    polygon: np.ndarray = _cv2().ellipse2Poly(centre, (int(length / 2), STICK), int(angle), 0, 360, 1)
    return polygon


def draw_body(canvas: np.ndarray, person: Person) -> np.ndarray:
    """A person's skeleton on an (H, W, 3) uint8 canvas (in place)."""
    cv2 = _cv2()
    height, width = canvas.shape[:2]
    for (a, b), color in zip(pose_people.LIMBS[:DRAWN_LIMBS], COLORS, strict=False):
        pa, pb = person[a - 1], person[b - 1]
        if pa is None or pb is None:
            continue
        cv2.fillConvexPoly(canvas, limb_polygon(pa, pb, width, height), [int(float(c) * 0.6) for c in color])
    for part, color in zip(person, COLORS, strict=True):
        if part is not None:
            cv2.circle(canvas, (int(part[0] * width), int(part[1] * height)), 4, color, thickness=-1)
    return canvas


def draw(people: Sequence[Person], height: int, width: int) -> np.ndarray:
    """The people's skeletons on a black (height, width, 3) uint8 canvas."""
    canvas = np.zeros((height, width, 3), np.uint8)
    for person in people:
        draw_body(canvas, person)
    return canvas


def resized_back(canvas: np.ndarray, picture: np.ndarray) -> np.ndarray:
    """The map drawn at the detection size, resized (linear) to the picture's."""
    if canvas.shape[:2] == picture.shape[:2]:
        return canvas
    cv2 = _cv2()
    out: np.ndarray = cv2.resize(canvas, (picture.shape[1], picture.shape[0]), interpolation=cv2.INTER_LINEAR)
    return out


def pose_map(
    module: nn.Module, picture: np.ndarray, settings: Mapping[str, float], device: torch.device,
    check: Callable[[], None] = lambda: None,
) -> np.ndarray:  # fmt: skip
    """The pose map ``module`` (an OpenPose body network, placed) makes of an RGB ``picture``."""
    small = resized(picture, int(settings["resolution"]))
    found = find_people(module, np.ascontiguousarray(small[:, :, ::-1]), device, check)
    return resized_back(draw(found, small.shape[0], small.shape[1]), picture)
