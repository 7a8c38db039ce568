"""The 5-point alignment insightface crops faces with (``utils/face_align.py``'s ``norm_crop``):
the similarity transform (rotation, uniform scale, translation) that best maps the detected eyes,
nose and mouth corners onto ArcFace's template (least squares, Umeyama's method, as
scikit-image's ``SimilarityTransform.estimate`` computes it), then the picture warped
with it (OpenCV's ``warpAffine``: linear, black outside)."""

from __future__ import annotations

import numpy as np

from core.preprocess.edges import _cv2

#: ArcFace's 112 x 112 template: left eye, right eye, nose tip, left and right mouth corners
ARCFACE_TEMPLATE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float32,
)


def similarity(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The 2 x 3 similarity transform taking the points ``src`` nearest to ``dst`` (Umeyama 1991,
    with scale), in the points' own precision as scikit-image computes it."""
    src, dst = np.asarray(src), np.asarray(dst)
    n, dim = src.shape
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_c, dst_c = src - src_mean, dst - dst_mean
    a = dst_c.T @ src_c / n
    d = np.ones((dim,), dtype=np.float64)
    if np.linalg.det(a) < 0:
        d[dim - 1] = -1
    t = np.eye(dim + 1, dtype=np.float64)
    u, s, v = np.linalg.svd(a)
    rank = int(np.count_nonzero(s > s.max() * max(a.shape) * np.finfo(float).eps))
    if rank == 0:
        raise ValueError("the landmarks are all one point")
    if rank == dim - 1:
        if np.linalg.det(u) * np.linalg.det(v) > 0:
            t[:dim, :dim] = u @ v
        else:
            keep = d[dim - 1]
            d[dim - 1] = -1
            t[:dim, :dim] = u @ np.diag(d) @ v
            d[dim - 1] = keep
    else:
        t[:dim, :dim] = u @ np.diag(d) @ v
    scale = 1.0 / src_c.var(axis=0).sum() * (s @ d)
    t[:dim, dim] = dst_mean - scale * (t[:dim, :dim] @ src_mean.T)
    t[:dim, :dim] *= scale
    return t[:2, :]


def template(size: int) -> np.ndarray:
    """ArcFace's template for a ``size`` x ``size`` crop (a multiple of 112 scales it; a multiple
    of 128 scales it by size / 128 and shifts it right by 8 of those units, as insightface)."""
    if size % 112 == 0:
        ratio, shift = size / 112.0, 0.0
    elif size % 128 == 0:
        ratio = size / 128.0
        shift = 8.0 * ratio
    else:
        raise ValueError(f"a face crop of {size} is not a multiple of 112 or 128")
    dst = ARCFACE_TEMPLATE * ratio
    dst[:, 0] += shift
    return dst


def align_face(picture: np.ndarray, landmarks: np.ndarray, size: int = 112) -> np.ndarray:
    """The face of ``picture`` ((H, W, 3) uint8) with the 5 ``landmarks`` cropped to ``size`` x
    ``size`` as ArcFace sees it."""
    matrix = similarity(landmarks, template(size))
    out: np.ndarray = _cv2().warpAffine(picture, matrix, (size, size), borderValue=0.0)
    return out
