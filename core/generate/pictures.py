"""Reading the pictures a generation starts from: an init picture, a ControlNet hint, a mask."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from core.errors import FileAccessError, FileFormatError, LoadoutError
from core.files.leases import open_input
from core.files.png_text import read_picture_header
from core.values import MAX_AREA, SIDE, BadValueError


def _open(path: Path, what: str) -> Image.Image:
    try:
        with open_input(path) as fh:  # a FIFO or device is refused, never waited on
            im = Image.open(fh)
            im.load()
        return im
    except LoadoutError:
        raise
    except FileNotFoundError:
        raise FileAccessError(
            f"{path} does not exist", fix=f"Check the {what} path", code="not_found"
        ) from None
    except Exception as exc:  # Pillow raises many kinds for damaged files (OSError, SyntaxError, ValueError)
        raise FileFormatError(
            f"{Path(path).name} is not a picture Loadout can read",
            why=str(exc),
            fix="Use a PNG, JPEG or WebP picture",
            code="not_an_image",
        ) from None


def read_picture(path: Path, what: str = "starting image") -> np.ndarray:
    """An image file as (H, W, 3) uint8 RGB (a writable array). Its size is read from the header
    and checked against the size limit of ``--size`` before a pixel is decoded."""
    if Path(path).exists():
        try:
            header = read_picture_header(path)
        except FileFormatError as exc:  # its words are for a picture read for its parameters
            raise FileFormatError(
                f"{Path(path).name} is not a picture Loadout can read",
                why=exc.why or exc.what,
                fix=f"Use a PNG, JPEG or WebP picture as the {what}",
                code="not_an_image",
            ) from None
        w, h = header.width, header.height
        if w * h > MAX_AREA or max(w, h) > SIDE.hi:
            raise BadValueError(
                f"the picture {Path(path).name} is {w}x{h} pixels, too large",
                why=f"pictures are limited to 4096x4096 in area and {int(SIDE.hi)} pixels a side",
                fix="Resize it first (e.g. to 1024 pixels on the long side)",
            )
    with _open(path, what) as im:
        return np.array(im.convert("RGB"))  # writable: torch.from_numpy takes it without a warning


def read_mask(path: Path) -> np.ndarray:
    """A mask file as (H, W) float32 in [0, 1], white = 1 (repaint): the red channel of the picture
    made RGBA, as ComfyUI's LoadImageMask (channel "red") reads it."""
    with _open(path, "mask picture") as im:
        if im.mode == "I":
            im = im.point(lambda v: v * (1 / 255))
        rgba = im.convert("RGBA")
        return np.asarray(rgba.getchannel("R")).astype(np.float32) / 255.0


def unit_pixels(rgb: np.ndarray) -> torch.Tensor:
    """(H, W, 3) uint8 -> [1, 3, H, W] float32 in [0, 1] (ComfyUI's LoadImage, channels first)."""
    return torch.from_numpy(np.array(rgb)).float().div(255.0).permute(2, 0, 1)[None]
