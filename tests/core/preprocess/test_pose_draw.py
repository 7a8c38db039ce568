"""Hands and faces drawn as controlnet_aux draws them: OpenPose's ``draw_handpose`` /
``draw_facepose`` (keypoints normalised, -1 where missing) and DWPose's (arrays of normalised
points), pixel for pixel, on a non-square canvas with keypoints on its edges and missing ones."""

from __future__ import annotations

import numpy as np

from core.preprocess.pose_draw import HAND_COLORS, draw_face, draw_hands
from tests.fixtures.controlnet_aux import aux

H, W = 96, 128


def _points(rng: np.random.Generator, n: int) -> np.ndarray:
    """n normalised (x, y) float32 points, some missing (-1), some at the canvas's first pixels."""
    pts = rng.uniform(0.0, 1.0, (n, 2)).astype(np.float32)
    pts[rng.random(n) < 0.15] = -1
    pts[1] = (0.5 / W, 0.5)  # truncated to column 0: not drawn (the reference's rule)
    pts[2] = (1.0 / W, 1.0 / H)  # column 1, row 1: drawn
    return pts


def _pixels(pts: np.ndarray) -> list[tuple[float, float] | None]:
    """The same points in pixels, as the reference computes them (``x * W`` in float32)."""
    return [(x * W, y * H) for x, y in pts]


def test_hands_and_faces_equal_controlnet_aux() -> None:
    open_pose = aux("open_pose.util")
    keypoint = aux("open_pose.body").Keypoint
    dwpose = aux("dwpose.util")
    rng = np.random.default_rng(0)
    hands = [_points(rng, 21) for _ in range(3)]
    faces = [_points(rng, 70) for _ in range(2)]

    want = np.zeros((H, W, 3), np.uint8)
    for hand in hands:
        want = open_pose.draw_handpose(want, [keypoint(x=x, y=y) for x, y in hand])
    for face in faces:
        want = open_pose.draw_facepose(want, [keypoint(x=x, y=y) for x, y in face])
    canvas = np.zeros((H, W, 3), np.uint8)
    got = draw_face(draw_hands(canvas, [_pixels(h) for h in hands]), [_pixels(f) for f in faces])
    assert got is canvas and np.array_equal(got, want)
    assert len(np.unique(got.reshape(-1, 3), axis=0)) > 10  # the hues, the red and white dots

    dw = dwpose.draw_facepose(dwpose.draw_handpose(np.zeros((H, W, 3), np.uint8), hands), faces)
    assert np.array_equal(got, dw)

    # None is missing as -1 is; None or empty hands and faces draw nothing
    hand = _pixels(hands[0])
    gone = [None if p[0] < 0 else p for p in hand]  # type: ignore[index]
    assert np.array_equal(
        draw_hands(np.zeros((H, W, 3), np.uint8), [gone, None, []]),
        draw_hands(np.zeros((H, W, 3), np.uint8), [hand]),
    )
    assert not draw_face(np.zeros((H, W, 3), np.uint8), [None, []]).any()


def test_the_hand_line_colours_are_the_references_hues() -> None:
    import matplotlib.colors

    for i, color in enumerate(HAND_COLORS):
        assert color == tuple(matplotlib.colors.hsv_to_rgb([i / 20.0, 1.0, 1.0]) * 255)
    # the first five lines (the thumb's four and the index finger's first), each drawn alone, in
    # their colours rounded: red, then towards yellow
    for i, (a, b) in enumerate(((0, 1), (1, 2), (2, 3), (3, 4), (0, 5))):
        hand: list[tuple[float, float] | None] = [None] * 21
        hand[a], hand[b] = (10.0, 50.0), (100.0, 50.0)
        line = draw_hands(np.zeros((H, W, 3), np.uint8), [hand])
        assert tuple(line[50, 50]) == tuple(round(c) for c in HAND_COLORS[i])
        assert tuple(line[50, 10]) == (0, 0, 255)  # the dot over the line's end
