"""SCRFD face detection as insightface runs it (``model_zoo/scrfd.py``, one input size):

1. the picture (BGR, uint8) is scaled to fit the square input (linear, OpenCV's ``resize``),
   keeping its ratio, into the top-left corner of a black input;
2. the network sees ``(x - 127.5) / 128`` in RGB order (OpenCV's ``blobFromImage`` with
   ``swapRB``);
3. for each stride (8, 16, 32) the outputs are one score, the distances to the box's four sides
   and 5 landmark offsets per anchor, two anchors per place of the stride's grid (centres at
   ``(x, y) * stride``), the distances times the stride;
4. the anchors scoring at least the threshold (0.5) are decoded, scaled back to the picture,
   sorted by score and thinned by non-maximum suppression (overlap above 0.4 with a better box, the
   overlap counting +1 pixel as insightface does)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.faces.files import OnnxModel
from core.preprocess.boxes import nms
from core.preprocess.edges import _cv2

STRIDES = (8, 16, 32)
ANCHORS = 2
MEAN, STD = 127.5, 128.0
THRESHOLD, NMS = 0.5, 0.4


@dataclass(frozen=True)
class Detection:
    """Faces found: ``boxes`` (N, 4) x1 y1 x2 y2, ``scores`` (N,), ``landmarks`` (N, 5, 2), best
    score first."""

    boxes: np.ndarray
    scores: np.ndarray
    landmarks: np.ndarray

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def _centres(height: int, width: int, stride: int) -> np.ndarray:
    ys, xs = np.mgrid[:height, :width]
    grid = np.stack([xs, ys], axis=-1).astype(np.float32)
    return np.repeat((grid * stride).reshape(-1, 2), ANCHORS, axis=0)


def _input(picture: np.ndarray, size: int) -> tuple[np.ndarray, float]:
    cv2 = _cv2()
    h, w = picture.shape[:2]
    if h / w > 1.0:
        new_h, new_w = size, int(size / (h / w))
    else:
        new_w, new_h = size, int(size * (h / w))
    canvas = np.zeros((size, size, 3), dtype=np.uint8)
    canvas[:new_h, :new_w] = cv2.resize(picture, (new_w, new_h))
    blob = cv2.dnn.blobFromImage(canvas, 1.0 / STD, (size, size), (MEAN, MEAN, MEAN), swapRB=True)
    return np.ascontiguousarray(blob, dtype=np.float32), new_h / h


def detect_faces(model: OnnxModel, picture: np.ndarray, size: int = 640) -> Detection:
    """The faces SCRFD finds in ``picture`` ((H, W, 3) uint8 BGR) at input size ``size``."""
    blob, scale = _input(picture, size)
    outs = model.run(blob)
    n = len(STRIDES)
    scores, boxes, marks = [], [], []
    for i, stride in enumerate(STRIDES):
        score = np.asarray(outs[i]).reshape(-1)
        dist = np.asarray(outs[i + n]).reshape(-1, 4) * stride
        kps = np.asarray(outs[i + 2 * n]).reshape(-1, 10) * stride
        centres = _centres(size // stride, size // stride, stride)
        keep = np.where(score >= THRESHOLD)[0]
        c = centres[keep]
        d = dist[keep]
        boxes.append(
            np.stack([c[:, 0] - d[:, 0], c[:, 1] - d[:, 1], c[:, 0] + d[:, 2], c[:, 1] + d[:, 3]], -1)
        )
        k = kps[keep].reshape(-1, 5, 2)
        marks.append(k + c[:, None, :])
        scores.append(score[keep])
    score_all = np.concatenate(scores).astype(np.float32)
    if score_all.size == 0:
        return Detection(np.zeros((0, 4), np.float32), score_all, np.zeros((0, 5, 2), np.float32))
    order = np.argsort(-score_all, kind="stable")
    box_all = (np.concatenate(boxes) / scale).astype(np.float32)[order]
    mark_all = (np.concatenate(marks) / scale)[order]
    score_all = score_all[order]
    keep_idx = nms(box_all, score_all, NMS, stable=True)
    return Detection(box_all[keep_idx], score_all[keep_idx], mark_all[keep_idx])
