"""People from OpenPose's maps, as controlnet_aux's ``Body`` finds them (one scale, 0.5 of 368 px):

1. each part's heatmap, smoothed by a Gaussian of sigma 3, peaks where it is at least its four
   neighbours and above 0.1 (the peak's score is the unsmoothed heatmap there);
2. for each of the 19 limbs, every pair of candidate ends is scored by the limb's affinity field
   sampled at 10 points on the segment (dot product with the segment's direction): at least 8 of
   the 10 above 0.05 and a mean, less a penalty for segments longer than half the picture's
   height, above 0; pairs are taken greedily by that score, each end used once;
3. limbs are joined into people through their shared parts (a person is started by one of the
   first 17 limbs only); people with fewer than 4 parts, or a mean score under 0.4, are dropped.

The tables are OpenPose's COCO-18 body (parts: nose, neck, right shoulder, elbow, wrist, left
shoulder, elbow, wrist, right hip, knee, ankle, left hip, knee, ankle, right eye, left eye, right
ear, left ear).
"""

from __future__ import annotations

import math

import numpy as np

PARTS = 18
#: the limbs, 1-based parts, in the order the affinity fields are read
LIMBS = ((2, 3), (2, 6), (3, 4), (4, 5), (6, 7), (7, 8), (2, 9), (9, 10), (10, 11), (2, 12), (12, 13),
         (13, 14), (2, 1), (1, 15), (15, 17), (1, 16), (16, 18), (3, 17), (6, 18))  # fmt: skip
#: each limb's (x, y) affinity channels (numbered after the 19 heatmaps, as OpenPose numbers them)
FIELDS = ((31, 32), (39, 40), (33, 34), (35, 36), (41, 42), (43, 44), (19, 20), (21, 22), (23, 24),
          (25, 26), (27, 28), (29, 30), (47, 48), (49, 50), (53, 54), (51, 52), (55, 56), (37, 38),
          (45, 46))  # fmt: skip
PEAK = 0.1
FIELD = 0.05
SAMPLES = 10

#: a part found: (x, y, score, id)
Peak = tuple[int, int, float, int]


def peaks(heatmaps: np.ndarray) -> list[list[Peak]]:
    """Each part's peaks in (H, W, 19) float64 heatmaps, ids counted over all parts."""
    from scipy.ndimage import gaussian_filter

    out: list[list[Peak]] = []
    counter = 0
    for part in range(PARTS):
        raw = heatmaps[:, :, part]
        smooth = gaussian_filter(raw, sigma=3)
        up, down, left, right = (np.zeros(smooth.shape) for _ in range(4))
        up[1:, :], down[:-1, :] = smooth[:-1, :], smooth[1:, :]
        left[:, 1:], right[:, :-1] = smooth[:, :-1], smooth[:, 1:]
        top = (smooth >= up) & (smooth >= down) & (smooth >= left) & (smooth >= right) & (smooth > PEAK)
        ys, xs = np.nonzero(top)
        found = [
            (int(x), int(y), float(raw[y, x]), counter + i)
            for i, (x, y) in enumerate(zip(xs, ys, strict=True))
        ]
        out.append(found)
        counter += len(found)
    return out


def _pair_score(a: Peak, b: Peak, field: np.ndarray, height: int) -> float | None:
    """The affinity score of the segment a -> b (None: not a limb)."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    norm = max(0.001, math.sqrt(dx * dx + dy * dy))
    ux, uy = dx / norm, dy / norm
    xs, ys = np.linspace(a[0], b[0], num=SAMPLES), np.linspace(a[1], b[1], num=SAMPLES)
    rows = [round(float(y)) for y in ys]  # half to even, as the reference's round
    cols = [round(float(x)) for x in xs]
    fx = np.array([field[r, c, 0] for r, c in zip(rows, cols, strict=True)])
    fy = np.array([field[r, c, 1] for r, c in zip(rows, cols, strict=True)])
    along = np.multiply(fx, ux) + np.multiply(fy, uy)
    score = sum(along) / len(along) + min(0.5 * height / norm - 1, 0)
    if len(np.nonzero(along > FIELD)[0]) > 0.8 * len(along) and score > 0:
        return float(score)
    return None


def limbs(found: list[list[Peak]], fields: np.ndarray, height: int) -> list[np.ndarray | None]:
    """Per limb, its connections as rows (id of a, id of b, score, index in a's peaks, in b's);
    None where one of its parts has no peak."""
    out: list[np.ndarray | None] = []
    for (pa, pb), channels in zip(LIMBS, FIELDS, strict=True):
        field = fields[:, :, [c - 19 for c in channels]]
        ends_a, ends_b = found[pa - 1], found[pb - 1]
        if not ends_a or not ends_b:
            out.append(None)
            continue
        scored = []
        for i, a in enumerate(ends_a):
            for j, b in enumerate(ends_b):
                s = _pair_score(a, b, field, height)
                if s is not None:
                    scored.append((i, j, s))
        scored.sort(key=lambda c: c[2], reverse=True)
        rows = np.zeros((0, 5))
        for i, j, s in scored:
            if i not in rows[:, 3] and j not in rows[:, 4]:
                rows = np.vstack([rows, [ends_a[i][3], ends_b[j][3], s, i, j]])
                if len(rows) >= min(len(ends_a), len(ends_b)):
                    break
        out.append(rows)
    return out


def people(found: list[list[Peak]], connections: list[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """(candidates (N, 4): x, y, score, id; people (P, 20): each part's candidate row or -1, then
    the total score and the number of parts)."""
    candidates = np.array([p for part in found for p in part])
    rows = -1 * np.ones((0, 20))
    for k, conn in enumerate(connections):
        if conn is None:
            continue
        ia, ib = LIMBS[k][0] - 1, LIMBS[k][1] - 1
        for c in conn:
            a, b = c[0], c[1]
            hits = [j for j in range(len(rows)) if rows[j][ia] == a or rows[j][ib] == b][:2]
            if len(hits) == 1 or (len(hits) == 2 and _overlap(rows[hits[0]], rows[hits[1]])):
                j = hits[0]
                if len(hits) == 2 or rows[j][ib] != b:
                    rows[j][ib] = b
                    rows[j][-1] += 1
                    rows[j][-2] += candidates[int(b), 2] + c[2]
            elif len(hits) == 2:  # two disjoint people the limb joins: merge them
                j1, j2 = hits
                rows[j1][:-2] += rows[j2][:-2] + 1
                rows[j1][-2:] += rows[j2][-2:]
                rows[j1][-2] += c[2]
                rows = np.delete(rows, j2, 0)
            elif not hits and k < 17:
                row = -1 * np.ones(20)
                row[ia], row[ib] = a, b
                row[-1] = 2
                row[-2] = sum(candidates[c[:2].astype(int), 2]) + c[2]
                rows = np.vstack([rows, row])
    keep = [i for i in range(len(rows)) if not (rows[i][-1] < 4 or rows[i][-2] / rows[i][-1] < 0.4)]
    return candidates, rows[keep]


def _overlap(p: np.ndarray, q: np.ndarray) -> bool:
    """Whether two people share a part (then a limb joining them extends the first only)."""
    both = ((p >= 0).astype(int) + (q >= 0).astype(int))[:-2]
    return len(np.nonzero(both == 2)[0]) != 0


def keypoints(candidates: np.ndarray, person: np.ndarray) -> list[tuple[float, float] | None]:
    """A person's 18 parts as (x, y) pixels (None: not found)."""
    return [
        None if i == -1 else (float(candidates[i][0]), float(candidates[i][1]))
        for i in person[:PARTS].astype(int)
    ]
