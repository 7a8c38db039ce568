"""Greedy non-maximum suppression of boxes (x1, y1, x2, y2) as the detectors' reference code does it
(areas in whole pixels: ``+ 1`` on each side), shared by DWPose's person detector and InsightFace's
face detector; they differ only in how equal scores are ordered, so each keeps its reference's."""

from __future__ import annotations

import numpy as np


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, *, stable: bool = False) -> list[int]:
    """The indices of the boxes kept, best first: each box drops the later ones that overlap it by
    more than ``iou``. Equal scores: ``stable`` keeps their order (insightface 2.x's
    ``argsort(-scores, kind="stable")``), else the reverse of NumPy's ascending sort (YOLOX's
    ``scores.argsort()[::-1]``)."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = np.argsort(-scores, kind="stable") if stable else scores.argsort()[::-1]
    keep: list[int] = []
    while order.size > 0:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        w = np.maximum(0.0, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]) + 1)
        inter = w * h
        order = rest[inter / (areas[i] + areas[rest] - inter) <= iou]
    return keep
