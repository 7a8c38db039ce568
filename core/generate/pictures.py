"""Reading the pictures a generation starts from: an init picture, a ControlNet hint, a mask."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from core.errors import FileAccessError, FileFormatError


def _open(path: Path, what: str) -> Image.Image:
    try:
        im = Image.open(path)
        im.load()
        return im
    except FileNotFoundError:
        raise FileAccessError(
            f"{path} does not exist", fix=f"Check the {what} path", code="not_found"
        ) from None
    except (UnidentifiedImageError, OSError) as exc:
        raise FileFormatError(
            f"{Path(path).name} is not a picture Loadout can read",
            why=str(exc),
            fix="Use a PNG, JPEG or WebP picture",
            code="not_an_image",
        ) from None


def read_picture(path: Path, what: str = "--init") -> np.ndarray:
    """An image file as (H, W, 3) uint8 RGB."""
    with _open(path, what) as im:
        return np.array(im.convert("RGB"))  # writable: torch.from_numpy takes it without a warning


def read_mask(path: Path) -> np.ndarray:
    """A mask file as (H, W) float32 in [0, 1], white = 1 (repaint): the red channel of the picture
    made RGBA, as ComfyUI's LoadImageMask (channel "red") reads it."""
    with _open(path, "--mask") as im:
        if im.mode == "I":
            im = im.point(lambda v: v * (1 / 255))
        rgba = im.convert("RGBA")
        return np.asarray(rgba.getchannel("R")).astype(np.float32) / 255.0
