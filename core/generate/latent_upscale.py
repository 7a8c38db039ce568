"""Resizing latents (and pictures) as ComfyUI's ``LatentUpscaleBy`` / ``ImageScaleBy`` do.

- The new size is ``round(side * scale)`` with Python's ``round`` (halves go to the even integer:
  a 5-wide latent at 1.5 becomes 8 wide, 7.5 rounded to even), for width and height separately.
- ``nearest-exact``, ``bilinear``, ``area`` and ``bicubic`` are ``torch.nn.functional.interpolate``
  with that mode and torch's defaults (``align_corners=False``, no antialiasing), as ComfyUI's
  ``common_upscale`` calls it.
- ``bislerp`` interpolates the C-channel vector of each position spherically (slerp of the unit
  directions, linear in the lengths), first along the width, then along the height, at the
  positions and weights bilinear interpolation would use. Where two vectors point the same way
  (cosine above 1 - 1e-5) the first is kept; where they are opposite, they are mixed linearly; a
  zero vector has a zero direction. The arithmetic is float32 whatever the input's dtype, and the
  result is cast back.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from core.errors import LoadoutError

LatentMethod = Literal["nearest-exact", "bilinear", "area", "bicubic", "bislerp"]
LATENT_METHODS: tuple[str, ...] = get_args(LatentMethod)


def scaled_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """(width, height) scaled as ComfyUI's ``*ScaleBy`` nodes do: Python's round, per side."""
    return round(width * scale), round(height * scale)


def _check(method: str) -> None:
    if method not in LATENT_METHODS:
        raise LoadoutError(
            f"unknown upscale method {method!r}",
            why="latents are resized with one of ComfyUI's LatentUpscaleBy methods",
            fix="Use one of: " + ", ".join(LATENT_METHODS),
            code="bad_argument",
        )


def resize(samples: Tensor, width: int, height: int, method: str) -> Tensor:
    """``samples`` [B, C, H, W] resized to ``height`` x ``width`` with ``method``."""
    _check(method)
    if width < 1 or height < 1:
        raise LoadoutError(
            f"cannot resize to {width}x{height}",
            why="a resized latent or picture needs at least one row and column",
            fix="Use a larger scale",
            code="bad_argument",
        )
    if method == "bislerp":
        return bislerp(samples, width, height)
    return F.interpolate(samples, size=(height, width), mode=method)


def upscale_by(samples: Tensor, scale: float, method: str = "nearest-exact") -> Tensor:
    """ComfyUI's LatentUpscaleBy (and ImageScaleBy on [B, C, H, W] pictures)."""
    width, height = scaled_size(samples.shape[-1], samples.shape[-2], scale)
    return resize(samples, width, height, method)


# -- bislerp --------------------------------------------------------------------------------------


def _taps(old: int, new: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """For each of ``new`` output positions along one axis: the weight of the second neighbour and
    the indices of the two neighbours in the ``old`` input positions, exactly where torch's
    bilinear resize (half-pixel centres, clamped at the edges) would sample."""
    where = torch.arange(old, dtype=torch.float32, device=device).view(1, 1, 1, old)
    position = F.interpolate(where, size=(1, new), mode="bilinear").view(new)
    weight = position - position.floor()
    first = position.to(torch.int64)
    # the right neighbour, clamped at the last input position, resampled the same way
    right = torch.arange(1, old + 1, dtype=torch.float32, device=device)
    right[-1] = old - 1
    second = F.interpolate(right.view(1, 1, 1, old), size=(1, new), mode="bilinear").view(new)
    return weight, first, second.to(torch.int64)


def _slerp(a: Tensor, b: Tensor, t: Tensor) -> Tensor:
    """Rows of ``a`` and ``b`` ([N, C]) interpolated spherically by ``t`` ([N, 1])."""
    len_a = torch.linalg.vector_norm(a, dim=-1, keepdim=True)
    len_b = torch.linalg.vector_norm(b, dim=-1, keepdim=True)
    dir_a = torch.where(len_a == 0.0, torch.zeros_like(a), a / len_a)
    dir_b = torch.where(len_b == 0.0, torch.zeros_like(b), b / len_b)
    cos = (dir_a * dir_b).sum(1)
    angle = torch.acos(cos)
    sin = torch.sin(angle)
    s = t.squeeze(1)
    mixed = (torch.sin((1.0 - s) * angle) / sin).unsqueeze(1) * dir_a
    mixed = mixed + (torch.sin(s * angle) / sin).unsqueeze(1) * dir_b
    mixed = mixed * (len_a * (1.0 - t) + len_b * t)
    same = (cos > 1 - 1e-5).unsqueeze(1)
    opposite = (cos < 1e-5 - 1).unsqueeze(1)
    mixed = torch.where(same, a, mixed)
    return torch.where(opposite, a * (1.0 - t) + b * t, mixed)


def _along_last(x: Tensor, new: int) -> Tensor:
    """``x`` [B, C, H, W] resized to width ``new`` by slerping channel vectors."""
    n, c, h, w = x.shape
    weight, first, second = _taps(w, new, x.device)
    a = x.index_select(3, first).movedim(1, -1).reshape(-1, c)
    b = x.index_select(3, second).movedim(1, -1).reshape(-1, c)
    t = weight.view(1, 1, new).expand(n, h, new).reshape(-1, 1)
    return _slerp(a, b, t).reshape(n, h, new, c).movedim(-1, 1)


def bislerp(samples: Tensor, width: int, height: int) -> Tensor:
    """ComfyUI's ``bislerp`` resize (see the module notes)."""
    dtype = samples.dtype
    x = samples.float()
    x = _along_last(x, width)
    x = _along_last(x.transpose(2, 3), height).transpose(2, 3)
    return x.contiguous().to(dtype)
