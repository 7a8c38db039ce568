"""Edge and line maps with OpenCV: canny, lineart (difference of Gaussians), softedge (Sobel).

Each takes an (H, W, 3) uint8 RGB picture and returns the hint as (H, W, 3) uint8, white strokes on
black as the canny / lineart / softedge ControlNets were trained on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core.errors import LoadoutError


def _cv2() -> Any:
    try:
        import cv2
    except ImportError:  # pragma: no cover - a dependency of the package
        raise LoadoutError(
            "the edge preprocessors need OpenCV, which is not installed",
            fix="Install it with: pip install opencv-python-headless",
            code="missing_dependency",
        ) from None
    return cv2


def _rgb(grey: np.ndarray) -> np.ndarray:
    return np.repeat(grey[..., None], 3, axis=2).astype(np.uint8)


def _grey(picture: np.ndarray) -> np.ndarray:
    cv2 = _cv2()
    grey: np.ndarray = cv2.cvtColor(picture, cv2.COLOR_RGB2GRAY)
    return grey


def canny(picture: np.ndarray, settings: Mapping[str, float]) -> np.ndarray:
    """OpenCV's Canny (3x3 Sobel, L1 gradient) with hysteresis thresholds ``low`` and ``high``."""
    cv2 = _cv2()
    low, high = int(settings["low"]), int(settings["high"])
    if low > high:
        low, high = high, low
    return _rgb(cv2.Canny(_grey(picture), low, high))


def lineart(picture: np.ndarray, settings: Mapping[str, float]) -> np.ndarray:
    """Lines where the grey picture is darker than its blurred self (a difference of Gaussians of
    width ``sigma`` and 1.6 ``sigma``), scaled to full white and cut below 8 %."""
    cv2 = _cv2()
    grey = _grey(picture).astype(np.float32)
    sigma = float(settings["sigma"])
    narrow = cv2.GaussianBlur(grey, (0, 0), sigma)
    wide = cv2.GaussianBlur(grey, (0, 0), 1.6 * sigma)
    dark = np.clip(wide - narrow, 0.0, None)
    peak = float(dark.max())
    if peak <= 0.0:
        return np.zeros(picture.shape, np.uint8)
    lines = dark / peak
    lines[lines < 0.08] = 0.0
    return _rgb(np.round(lines * 255.0))


def softedge(picture: np.ndarray, settings: Mapping[str, float]) -> np.ndarray:
    """The Sobel gradient's strength of the grey picture blurred by ``blur`` (0: none), scaled so
    the strongest edge is white."""
    cv2 = _cv2()
    grey = _grey(picture).astype(np.float32)
    blur = float(settings["blur"])
    if blur > 0:
        grey = cv2.GaussianBlur(grey, (0, 0), blur)
    gx = cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3)
    gy = cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3)
    strength = np.sqrt(gx * gx + gy * gy)
    peak = float(strength.max())
    if peak <= 0.0:
        return np.zeros(picture.shape, np.uint8)
    return _rgb(np.round(strength / peak * 255.0))
