"""Hands and faces drawn on a pose map, as controlnet_aux's OpenPose and DWPose draw them
(``draw_handpose`` / ``draw_facepose``; sd-webui-controlnet and comfyui_controlnet_aux draw the same):

* a hand: its 21 keypoints (the wrist, then each finger from thumb to little finger, base to tip)
  joined by 20 lines 2 px wide, the i-th line in the hue i/20 at full saturation and value, then
  each keypoint a red dot of radius 4;
* a face: each of its keypoints a white dot of radius 3.

Keypoints are ``(x, y)`` in the canvas's pixels (floats: the reference's ``int(x * W)``, so
``x`` here is the normalised ``x`` times the canvas width, truncated when drawn). A keypoint is
missing when it is None, or -- the reference's rule -- when either truncated coordinate is under 1
(negative ones included: the reference marks a part it did not find with -1). A line is drawn only
when both its ends are present. A hand or face that is None or empty is not drawn.

The canvas is an (H, W, 3) uint8 RGB array, drawn on in place and returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from core.preprocess.edges import _cv2

#: a keypoint in the canvas's pixels, or None where it is missing
Point = tuple[float, float] | None
#: a hand's 21 keypoints or a face's 70 (any number is drawn)
Points = Sequence[Point]

#: the hand's lines: keypoint pairs (0 the wrist, then four per finger from its base)
HAND_EDGES = ((0, 1), (1, 2), (2, 3), (3, 4), (0, 5), (5, 6), (6, 7), (7, 8), (0, 9), (9, 10),
              (10, 11), (11, 12), (0, 13), (13, 14), (14, 15), (15, 16), (0, 17), (17, 18), (18, 19),
              (19, 20))  # fmt: skip
HAND_LINE = 2
HAND_DOT = 4
HAND_DOT_COLOR = (0, 0, 255)
FACE_DOT = 3
FACE_DOT_COLOR = (255, 255, 255)
_EPS = 0.01  # the reference's threshold on truncated pixel coordinates


def _hue(h: float) -> tuple[float, float, float]:
    """RGB in 0..255 (unrounded) of hue ``h`` at full saturation and value, computed in the same
    float steps as matplotlib's ``hsv_to_rgb`` (the reference's), so OpenCV rounds it the same."""
    i = int(h * 6.0)
    f = (h * 6.0) - i
    p, q, t = 0.0, 1.0 - f, 1.0 - (1.0 - f)
    r, g, b = ((1.0, t, p), (q, 1.0, p), (p, 1.0, t), (p, q, 1.0), (t, p, 1.0), (1.0, p, q))[i % 6]
    return r * 255, g * 255, b * 255


#: each hand line's colour
HAND_COLORS = tuple(_hue(i / float(len(HAND_EDGES))) for i in range(len(HAND_EDGES)))


def _pixel(point: Point) -> tuple[int, int] | None:
    if point is None:
        return None
    x, y = int(point[0]), int(point[1])
    return (x, y) if x > _EPS and y > _EPS else None


def draw_hands(canvas: np.ndarray, hands: Iterable[Points | None]) -> np.ndarray:
    """Each hand's lines, then its dots, hand after hand."""
    cv2 = _cv2()
    for hand in hands:
        if not hand:
            continue
        pixels = [_pixel(p) for p in hand]
        for (a, b), color in zip(HAND_EDGES, HAND_COLORS, strict=True):
            pa, pb = pixels[a], pixels[b]
            if pa is not None and pb is not None:
                cv2.line(canvas, pa, pb, color, thickness=HAND_LINE)
        for p in pixels:
            if p is not None:
                cv2.circle(canvas, p, HAND_DOT, HAND_DOT_COLOR, thickness=-1)
    return canvas


def draw_face(canvas: np.ndarray, faces: Iterable[Points | None]) -> np.ndarray:
    """Each face's keypoints as dots."""
    cv2 = _cv2()
    for face in faces:
        for p in (_pixel(q) for q in face or ()):
            if p is not None:
                cv2.circle(canvas, p, FACE_DOT, FACE_DOT_COLOR, thickness=-1)
    return canvas
