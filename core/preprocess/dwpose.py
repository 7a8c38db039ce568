"""Whole-body poses (body, hands, face) with DWPose's two ONNX graphs, as DWPose's reference ONNX
code and ComfyUI's DWPreprocessor (comfyui_controlnet_aux's ``dw_onnx``) run them:

1. the person detector (YOLOX-L, ``yolox_l.onnx``) sees the picture letterboxed into its square
   input (640): scaled by the smaller of the two ratios (linear), placed top-left on grey 114, as
   float 0..255 in the picture's channel order (RGB, as ComfyUI hands it over); its 8400 rows
   (strides 8, 16 and 32 over the 640 square) are decoded as ``(dx + grid) * stride``,
   ``exp(dw) * stride``, scored ``objectness * class``; class-aware NMS (IoU 0.45) over the scores
   above 0.1, then the person class (0) with a score above 0.3 is kept;
2. each person box becomes a centre and a size padded by 1.25, widened to the pose input's aspect
   (288 x 384), the picture is warped onto that input (linear) and normalized by ImageNet's mean
   and std (RGB, in 0..255);
3. the pose network (RTMPose-l wholebody, ``dw-ll_ucoco_384.onnx``) answers SimCC vectors per
   keypoint (133: COCO-WholeBody): each keypoint at the argmax of its x and y vectors divided by
   the split ratio 2.0, scored by the smaller of the two maxima (MMPose's rule; rtmlib 0.0.16 takes
   their mean), then mapped back to the picture through the box;
4. the 133 keypoints become OpenPose's: a neck inserted as the mean of the shoulders (visible when
   both shoulders score above 0.3), the body reordered to OpenPose's 18 parts, the 68 face points
   and the two 21-point hands; a part is drawn when its score is above 0.3 (body) or at least
   0.3 (hands, face), as controlnet_aux's DWposeDetector decides.

No person found: nothing is drawn (ComfyUI's rule; DWPose's own annotator runs the pose network on
the whole picture then). The map (:func:`draw`) is drawn at the picture's size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from core.preprocess.boxes import nms
from core.preprocess.edges import _cv2
from core.preprocess.onnx_models import DETECTOR, POSE, OnnxModel

DETECT_PAD = 114
STRIDES = (8, 16, 32)
NMS_IOU = 0.45
CANDIDATE_SCORE = 0.1
PERSON_SCORE = 0.3
PERSON = 0
BOX_PADDING = 1.25
MEAN = (123.675, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
SPLIT_RATIO = 2.0
VISIBLE = 0.3
#: OpenPose's body parts 1..17 taken from MMPose's (neck inserted at 17) by index
OPENPOSE_PARTS = (1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17)
MMPOSE_PARTS = (17, 6, 8, 10, 7, 9, 12, 14, 16, 13, 15, 2, 1, 4, 3)
BODY, FACE, LEFT_HAND, RIGHT_HAND = slice(0, 18), slice(24, 92), slice(92, 113), slice(113, 134)

#: a point in 0..1 of the picture's width and height, or None when not drawn
Point = tuple[float, float] | None
#: (H, W, 3) uint8 picture -> its outputs, for one ONNX graph
Graph = Callable[[np.ndarray], list[np.ndarray]]


@dataclass(frozen=True)
class WholeBody:
    """One person: 18 OpenPose body parts, 68 face points, 21 points of each hand."""

    body: tuple[Point, ...]
    face: tuple[Point, ...]
    left_hand: tuple[Point, ...]
    right_hand: tuple[Point, ...]


def letterbox(picture: np.ndarray, side: int) -> tuple[np.ndarray, float]:
    """The detector's (1, 3, side, side) float32 input and the picture's scale in it."""
    cv2 = _cv2()
    ratio = min(side / picture.shape[0], side / picture.shape[1])
    rows, cols = int(picture.shape[0] * ratio), int(picture.shape[1] * ratio)
    padded = np.full((side, side, 3), DETECT_PAD, np.uint8)
    padded[:rows, :cols] = cv2.resize(picture, (cols, rows), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(padded.transpose(2, 0, 1)[None], dtype=np.float32), ratio


def _grid(side: int) -> tuple[np.ndarray, np.ndarray]:
    grids, strides = [], []
    for stride in STRIDES:
        cells = side // stride
        xs, ys = np.meshgrid(np.arange(cells), np.arange(cells))
        grids.append(np.stack((xs, ys), 2).reshape(-1, 2))
        strides.append(np.full((cells * cells, 1), stride))
    return np.concatenate(grids), np.concatenate(strides)


def decode_people(output: np.ndarray, side: int, ratio: float) -> np.ndarray:
    """The person boxes (N, 4) x1 y1 x2 y2 in the picture from the detector's (1, rows, 5 + classes)."""
    rows = np.array(output[0], dtype=np.float32)
    grid, stride = _grid(side)
    if rows.shape[0] != grid.shape[0]:
        raise ValueError(f"the detector answered {rows.shape[0]} rows, not {grid.shape[0]} for {side} px")
    rows[:, :2] = (rows[:, :2] + grid) * stride
    rows[:, 2:4] = np.exp(rows[:, 2:4]) * stride
    scores = rows[:, 4:5] * rows[:, 5:]
    boxes = np.empty_like(rows[:, :4])
    boxes[:, :2] = rows[:, :2] - rows[:, 2:4] / 2.0
    boxes[:, 2:] = rows[:, :2] + rows[:, 2:4] / 2.0
    boxes /= ratio
    kept = []
    for cls in range(scores.shape[1]):  # class-aware, as the reference's multiclass NMS
        mask = scores[:, cls] > CANDIDATE_SCORE
        if not mask.any():
            continue
        own, own_scores = boxes[mask], scores[mask, cls]
        kept += [(own[i], own_scores[i], cls) for i in nms(own, own_scores, NMS_IOU)]
    return np.array([b for b, s, c in kept if s > PERSON_SCORE and c == PERSON], np.float32).reshape(-1, 4)


def pose_input(
    picture: np.ndarray, box: np.ndarray, size: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pose network's (1, 3, rows, cols) float32 input for one box, the box's centre and its
    size in the picture (padded, at the input's aspect). ``size``: (cols, rows)."""
    cv2 = _cv2()
    centre = np.array([box[0] + box[2], box[1] + box[3]]) * 0.5
    scale = np.array([box[2] - box[0], box[3] - box[1]]) * BOX_PADDING
    aspect = size[0] / size[1]
    if scale[0] > scale[1] * aspect:
        scale = np.array([scale[0], scale[0] / aspect])
    else:
        scale = np.array([scale[1] * aspect, scale[1]])
    # three point pairs: the centre, the point half a width above it, and one a quarter turn off
    src = np.zeros((3, 2), np.float32)
    dst = np.zeros((3, 2), np.float32)
    src[0], src[1] = centre, centre + np.array([0.0, -0.5 * scale[0]])
    dst[0] = (size[0] * 0.5, size[1] * 0.5)
    dst[1] = dst[0] + np.array([0.0, -0.5 * size[0]])
    for pts in (src, dst):
        d = pts[0] - pts[1]
        pts[2] = pts[1] + np.array([-d[1], d[0]])
    warp = cv2.getAffineTransform(src, dst)
    crop = cv2.warpAffine(picture, warp, (int(size[0]), int(size[1])), flags=cv2.INTER_LINEAR)
    x = (crop - np.array(MEAN)) / np.array(STD)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32), centre, scale


def decode_keypoints(
    simcc_x: np.ndarray, simcc_y: np.ndarray, size: tuple[int, int], centre: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(K, 2) keypoints in the picture and (K,) scores from one box's SimCC vectors."""
    sx, sy = simcc_x.reshape(simcc_x.shape[-2], -1), simcc_y.reshape(simcc_y.shape[-2], -1)
    locs = np.stack((np.argmax(sx, axis=1), np.argmax(sy, axis=1)), axis=-1).astype(np.float32)
    scores = np.minimum(np.amax(sx, axis=1), np.amax(sy, axis=1))
    locs[scores <= 0.0] = -1
    points = locs / SPLIT_RATIO / np.array(size) * scale + centre - scale / 2
    return points, scores


def openpose_order(points: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(134, 2) points and (134,) scores: the neck inserted after MMPose's 17 body parts and the
    body reordered to OpenPose's (the feet, face and hands follow as they were)."""
    neck = points[[5, 6]].mean(axis=0)
    neck_score = float(scores[5] > VISIBLE and scores[6] > VISIBLE)
    pts = np.insert(points, 17, neck, axis=0)
    sc = np.insert(scores, 17, neck_score)
    pts[list(OPENPOSE_PARTS)] = pts[list(MMPOSE_PARTS)]
    sc[list(OPENPOSE_PARTS)] = sc[list(MMPOSE_PARTS)]
    return pts, sc


def whole_body(points: np.ndarray, scores: np.ndarray, height: int, width: int) -> WholeBody:
    """One person's parts to draw (in 0..1) from its OpenPose-ordered points and scores."""
    rel = points / np.array([float(width), float(height)])

    def part(span: slice, body: bool) -> tuple[Point, ...]:
        return tuple(
            (float(p[0]), float(p[1])) if (s > VISIBLE if body else s >= VISIBLE) else None
            for p, s in zip(rel[span], scores[span], strict=True)
        )

    return WholeBody(part(BODY, True), part(FACE, False), part(LEFT_HAND, False), part(RIGHT_HAND, False))


def estimate(
    picture: np.ndarray, detector: Graph, detector_side: int, pose: Graph, pose_size: tuple[int, int],
    check: Callable[[], None] = lambda: None,
) -> list[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """Each person's (134, 2) points in the picture and (134,) scores in OpenPose's order, from an
    (H, W, 3) uint8 RGB picture. ``detector``/``pose`` run the two graphs; ``detector_side``: the
    detector's square input; ``pose_size``: the pose input's (cols, rows)."""
    x, ratio = letterbox(picture, detector_side)
    boxes = decode_people(detector(x)[0], detector_side, ratio)
    found = []
    for box in boxes:
        check()
        inp, centre, scale = pose_input(picture, box, pose_size)
        simcc_x, simcc_y = pose(inp)[:2]
        found.append(openpose_order(*decode_keypoints(simcc_x[0], simcc_y[0], pose_size, centre, scale)))
    return found


def find_people(
    models: Mapping[str, OnnxModel], picture: np.ndarray, check: Callable[[], None] = lambda: None
) -> list[WholeBody]:
    """The people DWPose's two sessions find in an RGB ``picture``."""
    detector, pose = models[DETECTOR], models[POSE]
    rows, cols = pose.input_size
    found = estimate(picture, detector.run, detector.input_size[0], pose.run, (cols, rows), check)
    return [whole_body(points, scores, picture.shape[0], picture.shape[1]) for points, scores in found]


def dwpose_map(
    models: Mapping[str, OnnxModel], picture: np.ndarray, settings: Mapping[str, float],
    check: Callable[[], None] = lambda: None,
) -> np.ndarray:  # fmt: skip
    """The map DWPose's two sessions make of an RGB ``picture``, at its size."""
    return draw(find_people(models, picture, check), picture.shape[0], picture.shape[1], settings)


def draw_bodies(canvas: np.ndarray, people: Sequence[WholeBody]) -> np.ndarray:
    """Every person's 17 limbs (limb by limb over the people) as ellipses 4 px thick in OpenPose's
    colours, the canvas then dimmed to 60 %, then the 18 parts as dots of radius 4 (controlnet_aux's
    DWPose ``draw_bodypose``)."""
    from core.preprocess.pose import COLORS, DRAWN_LIMBS, limb_polygon
    from core.preprocess.pose_people import LIMBS

    cv2 = _cv2()
    height, width = canvas.shape[:2]
    for (a, b), color in zip(LIMBS[:DRAWN_LIMBS], COLORS, strict=False):
        for person in people:
            pa, pb = person.body[a - 1], person.body[b - 1]
            if pa is None or pb is None:
                continue
            cv2.fillConvexPoly(canvas, limb_polygon(pa, pb, width, height), list(color))
    canvas = (canvas * 0.6).astype(np.uint8)
    for i, color in enumerate(COLORS):
        for person in people:
            p = person.body[i]
            if p is not None:
                cv2.circle(canvas, (int(p[0] * width), int(p[1] * height)), 4, color, thickness=-1)
    return canvas


def draw(people: Sequence[WholeBody], height: int, width: int, parts: Mapping[str, float]) -> np.ndarray:
    """The map on black at (height, width): bodies, then every left hand and every right hand, then
    the faces, as controlnet_aux's DWPose ``draw_pose``; ``parts``: body/hands/face 0 leaves it out."""
    from core.preprocess.pose_draw import draw_face, draw_hands

    def pixels(points: tuple[Point, ...]) -> list[Point]:
        return [None if p is None else (p[0] * width, p[1] * height) for p in points]

    canvas = np.zeros((height, width, 3), np.uint8)
    if parts.get("body", 1):
        canvas = draw_bodies(canvas, people)
    if parts.get("hands", 1):
        hands = [pixels(p.left_hand) for p in people] + [pixels(p.right_hand) for p in people]
        canvas = draw_hands(canvas, hands)
    if parts.get("face", 1):
        canvas = draw_face(canvas, [pixels(p.face) for p in people])
    return canvas
