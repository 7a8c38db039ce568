"""Pictures in a decoder-LLM prompt (Qwen2.5-VL, for Qwen-Image-Edit), as ComfyUI's
``TextEncodeQwenImageEditPlus`` and ``Qwen25_7BVLI`` do it:

- each picture is scaled (area averaging) to about ``PictureSpec.area`` pixels, then the vision
  tower's own sizing (whole 28 px tokens, bilinear) and normalisation
  (``core.models.llm.vision.picture_patches``);
- the prompt is put after one ``Picture N: <|vision_start|><|image_pad|><|vision_end|>`` per picture;
- the N-th ``<|image_pad|>`` token stands for the N-th picture's tokens from the vision tower (one
  per 28 px), which replace its embedding in the language model's input;
- positions are Qwen2.5-VL's 3D ones (time, row, column): text runs on 0, 1, 2, ... on every
  axis; a picture starting at ``s`` puts its token (r, c) at (s, s + r, s + c); the text after it
  goes on from ``s + max(rows, cols)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.errors import LoadoutError
from core.models.llm.vision import QwenVisionTower, picture_patches


@dataclass(frozen=True)
class PictureSpan:
    """A picture's tokens in the language model's input: from ``start``, ``rows`` x ``cols``."""

    start: int
    rows: int
    cols: int

    @property
    def size(self) -> int:
        return self.rows * self.cols


def scaled(picture: torch.Tensor, area: int) -> torch.Tensor:
    """``picture`` [3, H, W] scaled to about ``area`` pixels, its sides rounded (ComfyUI's
    ``common_upscale`` with "area": averaging)."""
    h, w = int(picture.shape[1]), int(picture.shape[2])
    k = math.sqrt(area / (w * h))
    size = (max(1, round(h * k)), max(1, round(w * k)))
    return F.interpolate(picture[None].float(), size=size, mode="area")[0]


def picture_tokens(
    visual: QwenVisionTower,
    pictures: Sequence[torch.Tensor],
    area: int,
    dtype: torch.dtype,
    device: torch.device | None = None,
) -> list[tuple[torch.Tensor, int, int]]:
    """Each picture's tokens (rows x cols, width) from the vision tower, with rows and cols;
    ``pictures``: RGB in 0..1, [3, H, W] or [1, 3, H, W]."""
    if device is None:  # where the manager computes; else where the tower's weights are
        device = visual.patch_embed.proj.weight.device
    m = visual.config.merge_size
    out = []
    for picture in pictures:
        if picture.ndim == 4 and picture.shape[0] == 1:  # [1, 3, H, W] as the workflow reads it
            picture = picture[0]
        patches, (_, gh, gw) = picture_patches(scaled(picture, area), visual.config)
        with torch.inference_mode():
            out.append((visual(patches.to(device), (1, gh, gw), dtype=dtype), gh // m, gw // m))
    return out


def expand(ids: list[int], token: int, counts: Sequence[int]) -> tuple[list[int], list[int]]:
    """``ids`` with the first ``len(counts)`` ``token``s repeated ``counts`` times each (as the
    pictures' tokens stand there), and where each run starts."""
    out: list[int] = []
    starts: list[int] = []
    for t in ids:
        if t == token and len(starts) < len(counts):
            starts.append(len(out))
            out.extend([t] * counts[len(starts) - 1])
        else:
            out.append(t)
    if len(starts) < len(counts):
        raise LoadoutError(
            f"the prompt has places for {len(starts)} pictures, {len(counts)} were given",
            why="each picture needs its own picture token in the prompt's template",
            fix="give at most as many pictures as the prompt's template takes",
            code="bad_argument",
        )
    return out, starts


def positions(length: int, spans: Sequence[PictureSpan]) -> torch.Tensor:
    """(3, length) positions: text 0, 1, ... on all axes; a picture at (s, s + r, s + c)."""
    pos = torch.zeros(3, length, dtype=torch.float32)
    shift = 0  # how far the positions lag behind the token index
    at = 0
    for span in spans:
        pos[:, at : span.start] = torch.arange(at, span.start, dtype=torch.float32) - shift
        s = span.start - shift
        rows = torch.arange(span.rows, dtype=torch.float32)[:, None].expand(-1, span.cols).reshape(-1)
        cols = torch.arange(span.cols, dtype=torch.float32)[None, :].expand(span.rows, -1).reshape(-1)
        end = span.start + span.size
        pos[0, span.start : end] = s
        pos[1, span.start : end] = s + rows
        pos[2, span.start : end] = s + cols
        shift += span.size - max(span.rows, span.cols)
        at = end
    pos[:, at:] = torch.arange(at, length, dtype=torch.float32) - shift
    return pos
