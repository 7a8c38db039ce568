"""Hands and faces of the people OpenPose's body network found, as controlnet_aux's
``OpenposeDetector`` finds them (``include_hand`` / ``include_face``):

* a hand's box (``handDetect``, after OpenPose's hand detector): from the wrist, elbow and
  shoulder, centred a third of the forearm past the wrist, 1.5 times the longer of the forearm and
  0.9 of the upper arm wide, cut to the picture; boxes under 20 px are dropped;
* a face's box (``faceDetect``): centred on the nose, the largest of 3 times its distance (the
  larger of dx and dy) to an eye and 1.5 times to an ear, each way, cut to the picture; none under
  20 px or without an eye or ear;
* a hand's keypoints: its box blurred (Gaussian, sigma 0.8), seen by the hand network square at
  184, 368, 552 and 736 px, each run's 22 heatmaps resized by 8 (Lanczos) and to 128 x 128 (area)
  and averaged; per keypoint, the heatmap smoothed (sigma 3) and cut at 0.05, only its connected
  region (8-neighbour) of largest heat kept, and its maximum taken (none: missing);
* a face's keypoints: its box resized to 384 x 384 (area or Lanczos) and seen by the face network,
  whose 71 heatmaps are resized to the box (bilinear, corners aligned); each heatmap's maximum above
  0.05 is a keypoint -- the background's heatmap included, and a heatmap with none skipped (so the
  face's points are not numbered by part: as the reference, they are only drawn).

Keypoints come back as (N, 2) float32 arrays in 0..1 of the picture's width and height, -1 where
missing (a coordinate of 0 in the box counts as missing, as in the reference), computed in the
reference's float32 steps so that the drawn dots land on its pixels.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from core.preprocess.edges import _cv2
from core.preprocess.pose import aux_scaled

#: a person's 18 body parts in the picture's pixels (None: not found)
PixelPerson = list[tuple[float, float] | None]
#: keypoints in 0..1 of the picture, -1 where missing
Keypoints = np.ndarray

HAND_SCALES = (0.5, 1.0, 1.5, 2.0)
HAND_BOX = 368
HAND_GRID = 128
HAND_PEAK = 0.05
HAND_POINTS = 21
FACE_SIZE = 384
FACE_PEAK = 0.05
MIN_BOX = 20
STRIDE = 8
PAD = 128
#: (shoulder, elbow, wrist) parts of the left and right arms (COCO-18, 0-based)
ARMS = (((5, 6, 7), True), ((2, 3, 4), False))


def hand_boxes(person: PixelPerson, height: int, width: int) -> list[tuple[int, int, int, bool]]:
    """(x, y, side, is_left) of each hand's square box, the left one first."""
    out = []
    for (s, e, w), is_left in ARMS:
        shoulder, elbow, wrist = person[s], person[e], person[w]
        if shoulder is None or elbow is None or wrist is None:
            continue
        x = wrist[0] + 0.33 * (wrist[0] - elbow[0])
        y = wrist[1] + 0.33 * (wrist[1] - elbow[1])
        forearm = math.sqrt((wrist[0] - elbow[0]) ** 2 + (wrist[1] - elbow[1]) ** 2)
        upper = math.sqrt((elbow[0] - shoulder[0]) ** 2 + (elbow[1] - shoulder[1]) ** 2)
        side = 1.5 * max(forearm, 0.9 * upper)
        x, y = max(x - side / 2, 0), max(y - side / 2, 0)
        side = min(width - x if x + side > width else side, height - y if y + side > height else side)
        if side >= MIN_BOX:
            out.append((int(x), int(y), int(side), is_left))
    return out


def face_box(person: PixelPerson, height: int, width: int) -> tuple[int, int, int] | None:
    """(x, y, side) of the face's square box, or None."""
    nose = person[0]
    around = [(person[i], k) for i, k in ((14, 3.0), (15, 3.0), (16, 1.5), (17, 1.5))]
    if nose is None or all(p is None for p, _k in around):
        return None
    half = 0.0
    for p, k in around:
        if p is not None:
            half = max(half, max(abs(nose[0] - p[0]), abs(nose[1] - p[1])) * k)
    x, y = max(nose[0] - half, 0), max(nose[1] - half, 0)
    # as the reference: the box is cut where its half (not its whole side) would leave the picture
    side = min(width - x if x + half > width else half * 2, height - y if y + half > height else half * 2)
    return (int(x), int(y), int(side)) if side >= MIN_BOX else None


def hand_peaks(
    module: nn.Module, crop: np.ndarray, device: torch.device, check: Callable[[], None] = lambda: None
) -> np.ndarray:
    """The 21 keypoints (x, y) in the (h, w, 3) uint8 BGR ``crop``'s pixels, (0, 0) where missing."""
    from scipy.ndimage import gaussian_filter, label

    cv2 = _cv2()
    rows, cols = crop.shape[:2]
    blurred = cv2.GaussianBlur(crop, (0, 0), 0.8)
    average = np.zeros((HAND_GRID, HAND_GRID, 22))
    for scale in HAND_SCALES:
        side = scale * HAND_BOX
        small = aux_scaled(blurred, side, side)
        h, w = small.shape[:2]
        padded = np.full((h + (-h) % STRIDE, w + (-w) % STRIDE, 3), PAD, np.uint8)
        padded[:h, :w] = small
        x = np.ascontiguousarray(padded.astype(np.float32).transpose(2, 0, 1)[None] / 256 - 0.5)
        check()
        with torch.inference_mode():
            out = module(torch.from_numpy(x).float().to(device))
        heat = out[0].float().cpu().numpy().transpose(1, 2, 0)
        heat = aux_scaled(heat, heat.shape[0] * STRIDE, heat.shape[1] * STRIDE)[:h, :w]
        average += aux_scaled(heat, HAND_GRID, HAND_GRID) / len(HAND_SCALES)
    check()
    peaks = []
    for part in range(HAND_POINTS):
        heat = average[:, :, part]
        binary = np.ascontiguousarray(gaussian_filter(heat, sigma=3) > HAND_PEAK, dtype=np.uint8)
        if binary.sum() == 0:
            peaks.append([0, 0])
            continue
        regions, count = label(binary, structure=np.ones((3, 3)))
        best = int(np.argmax([np.sum(heat[regions == i]) for i in range(1, count + 1)])) + 1
        heat[regions != best] = 0
        i = int(heat.max(1).argmax())
        j = int(heat.argmax(1)[i])
        peaks.append([int(float(j) * float(cols) / HAND_GRID), int(float(i) * float(rows) / HAND_GRID)])
    return np.array(peaks)


def face_peaks(
    module: nn.Module, crop: np.ndarray, device: torch.device, check: Callable[[], None] = lambda: None
) -> np.ndarray:
    """The face's keypoints (x, y) in the (h, w, 3) uint8 BGR ``crop``'s pixels: (N, 2), N <= 71."""
    rows, cols = crop.shape[:2]
    x = torch.from_numpy(aux_scaled(crop, FACE_SIZE, FACE_SIZE)).permute([2, 0, 1]) / 256.0 - 0.5
    check()
    with torch.inference_mode():
        out = module(x[None].to(device)).float()
        heatmaps = F.interpolate(out, (rows, cols), mode="bilinear", align_corners=True).cpu().numpy()[0]
    check()
    peaks = []
    for heat in heatmaps:
        ys, xs = np.nonzero(heat > FACE_PEAK)
        if len(ys):
            best = int(np.argmax(heat[ys, xs]))
            peaks.append([xs[best], ys[best]])
    return np.array(peaks)


def _in_picture(peaks: np.ndarray, x: int, y: int, height: int, width: int) -> Keypoints | None:
    """The box's peaks in 0..1 of the picture (float32; -1 where a coordinate is 0)."""
    out = peaks.astype(np.float32)
    if out.ndim != 2 or out.shape[1] != 2:
        return None
    out[:, 0] = np.where(out[:, 0] < 1e-6, -1, out[:, 0] + x) / float(width)
    out[:, 1] = np.where(out[:, 1] < 1e-6, -1, out[:, 1] + y) / float(height)
    return out


def hands_of(
    module: nn.Module, person: PixelPerson, bgr: np.ndarray, device: torch.device,
    check: Callable[[], None] = lambda: None,
) -> tuple[Keypoints | None, Keypoints | None]:  # fmt: skip
    """(left, right) hand keypoints of a person in the (H, W, 3) uint8 BGR picture."""
    height, width = bgr.shape[:2]
    found: dict[bool, Keypoints | None] = {True: None, False: None}
    for x, y, side, is_left in hand_boxes(person, height, width):
        peaks = hand_peaks(module, bgr[y : y + side, x : x + side, :], device, check)
        found[is_left] = _in_picture(peaks, x, y, height, width)
    return found[True], found[False]


def face_of(
    module: nn.Module, person: PixelPerson, bgr: np.ndarray, device: torch.device,
    check: Callable[[], None] = lambda: None,
) -> Keypoints | None:  # fmt: skip
    """A person's face keypoints in the (H, W, 3) uint8 BGR picture (None: no face box or points)."""
    height, width = bgr.shape[:2]
    box = face_box(person, height, width)
    if box is None:
        return None
    x, y, side = box
    peaks = face_peaks(module, bgr[y : y + side, x : x + side, :], device, check)
    return _in_picture(peaks, x, y, height, width)


def in_pixels(points: Keypoints | None, height: int, width: int) -> list[tuple[float, float]] | None:
    """Keypoints in the canvas's pixels for :mod:`core.preprocess.pose_draw` (the reference's
    ``x * W`` in float32)."""
    if points is None:
        return None
    return [(float(x * width), float(y * height)) for x, y in points]
