"""Saving pictures as PNG with their parameters, and reading the parameters back.

The parameters go in a ``parameters`` tEXt/iTXt chunk (A1111's place, read by Civitai and others).
Files are written atomically: a half-written PNG never replaces a good one.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
from PIL import Image, PngImagePlugin

from core.errors import FileFormatError
from core.files.atomic import atomic_write_bytes
from core.files.png_text import read_picture_header


def to_uint8_rgb(pixels: torch.Tensor) -> np.ndarray:
    """A decoded image (3, H, W) in [-1, 1] -> (H, W, 3) uint8, rounded as ComfyUI's SaveImage does
    (clamp to [0, 1], scale by 255, clip; the float value is truncated after adding nothing)."""
    if pixels.ndim != 3 or pixels.shape[0] != 3:
        raise ValueError(f"expected one (3, H, W) image, got {tuple(pixels.shape)}")
    x = ((pixels.detach().to("cpu", torch.float32) + 1.0) / 2.0).clamp(0.0, 1.0)
    arr = (255.0 * x).permute(1, 2, 0).numpy()
    out: np.ndarray = np.clip(arr, 0, 255).astype(np.uint8)
    return out


def png_bytes(rgb: np.ndarray, parameters: str | None = None) -> bytes:
    """Encode (H, W, 3) uint8 as PNG, with the ``parameters`` text chunk when given."""
    info = PngImagePlugin.PngInfo()
    if parameters and parameters.isascii():
        info.add_text("parameters", parameters)
    elif parameters:
        info.add_itxt("parameters", parameters)  # UTF-8
    buf = io.BytesIO()
    Image.fromarray(rgb, mode="RGB").save(buf, format="PNG", pnginfo=info, compress_level=4)
    return buf.getvalue()


def save_png(path: Path, rgb: np.ndarray, parameters: str | None = None) -> Path:
    """Write the picture atomically; returns ``path``."""
    atomic_write_bytes(Path(path), png_bytes(rgb, parameters))
    return Path(path)


def read_png_parameters(path: Path) -> str:
    """The A1111 ``parameters`` text of an image file, or a clear error saying why there is none.
    Only the header and text chunks are read (:mod:`core.files.png_text`): never the pixels."""
    path = Path(path)
    header = read_picture_header(path)
    value = header.text.get("parameters")
    if value is not None and value.strip():
        return value
    comfy = "prompt" in header.text or "workflow" in header.text
    if header.skipped and not comfy:
        why = "its text was not read: " + "; ".join(header.skipped)
    elif comfy:
        why = "it was saved by ComfyUI, which stores its workflow graph, not A1111 parameters"
    else:
        why = "the picture has no 'parameters' text chunk"
    raise FileFormatError(
        f"{path.name} carries no generation parameters",
        why=why,
        fix="Use a picture saved by Loadout, A1111 or Forge, or type the settings in",
        code="no_parameters",
    )
