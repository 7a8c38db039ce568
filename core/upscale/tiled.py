"""Running an upscale model over a picture in overlapping tiles, as ComfyUI's ImageUpscaleWithModel
does (its ``tiled_scale``):

- tiles of 512 x 512 input pixels overlapping by 32; a picture that fits one tile runs whole;
- along each side, tiles start at 0, tile - overlap, 2 (tile - overlap), ... up to (not including)
  side - overlap, each start clamped to at most side - overlap; a tile is cut at the picture's edge;
- each tile's output is weighted by a feathered mask: its first and last ``round(overlap * scale)``
  rows and columns ramp (t + 1) / feather (t = 0, 1, ...), a side no longer than the feather is
  not feathered; outputs and weights are summed at ``round(start * scale)`` and divided at the end;
- when the device runs out of memory, the whole picture is tried again with tiles half as large,
  down to 128;
- the result is clamped to [0, 1] (each tile already is: spandrel clamps its outputs).

Each picture of a batch is done on its own. The sums are float32 on the CPU, as in ComfyUI.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import Tensor

from core.memory.manager import NotEnoughMemoryError

TILE = 512
OVERLAP = 32
SMALLEST_TILE = 128
#: ComfyUI's estimate of an upscale model's activations per input value (times its scale)
ACTIVATION_FACTOR = 384.0


def tile_starts(side: int, tile: int, overlap: int) -> list[int]:
    """Where the tiles along one side of ``side`` input pixels start."""
    if side <= tile:
        return [0]
    return [max(0, min(side - overlap, p)) for p in range(0, side - overlap, tile - overlap)]


def tile_count(height: int, width: int, tile: int = TILE, overlap: int = OVERLAP) -> int:
    return len(tile_starts(height, tile, overlap)) * len(tile_starts(width, tile, overlap))


def feather_mask(shape: torch.Size, feather: int) -> Tensor:
    """Weights of one tile's output: ramps of ``feather`` rows/columns at every edge."""
    mask = torch.ones(shape)
    for dim in (2, 3):
        if feather >= mask.shape[dim]:
            continue
        for t in range(feather):
            a = (t + 1) / feather
            mask.narrow(dim, t, 1).mul_(a)
            mask.narrow(dim, mask.shape[dim] - 1 - t, 1).mul_(a)
    return mask


def tiled_scale(
    pictures: Tensor,
    fn: Callable[[Tensor], Tensor],
    *,
    scale: int,
    out_channels: int = 3,
    tile: int = TILE,
    overlap: int = OVERLAP,
    done: Callable[[], None] = lambda: None,
) -> Tensor:
    """``fn`` over ``pictures`` [B, C, H, W] in tiles (see the module notes); float32 on the CPU.
    ``done`` is called after each tile (progress and the interrupt check)."""
    b, _, h, w = pictures.shape
    out_h, out_w = round(h * scale), round(w * scale)
    output = torch.empty(b, out_channels, out_h, out_w)
    feather = round(overlap * scale)
    for i in range(b):
        one = pictures[i : i + 1]
        if h <= tile and w <= tile:
            output[i : i + 1] = fn(one).to("cpu", torch.float32)
            done()
            continue
        total = torch.zeros(1, out_channels, out_h, out_w)
        weight = torch.zeros(1, out_channels, out_h, out_w)
        for y, x in itertools.product(tile_starts(h, tile, overlap), tile_starts(w, tile, overlap)):
            piece = one[:, :, y : y + min(tile, h - y), x : x + min(tile, w - x)]
            result = fn(piece).to("cpu", torch.float32)
            mask = feather_mask(result.shape, feather)
            oy, ox = round(y * scale), round(x * scale)
            rows, cols = result.shape[2], result.shape[3]
            total[:, :, oy : oy + rows, ox : ox + cols].add_(result * mask)
            weight[:, :, oy : oy + rows, ox : ox + cols].add_(mask)
            done()
        output[i : i + 1] = total / weight
    return output


def activation_bytes(scale: int, height: int, width: int, element_size: int = 4, tile: int = TILE) -> int:
    """Room for one tile's activations, by ComfyUI's rule of thumb (3 x tile area x element size x
    scale x 384), for the tile actually used (a picture smaller than a tile runs whole) plus the
    picture itself."""
    area = min(tile, height) * min(tile, width)
    picture = 3 * height * width * element_size
    return int(area * 3 * element_size * max(scale, 1) * ACTIVATION_FACTOR) + picture


def upscale_pictures(
    model: Callable[[Tensor], Tensor],
    pictures: Tensor,
    *,
    scale: int,
    out_channels: int,
    device: torch.device,
    check: Callable[[], None] = lambda: None,
    progress: Callable[[int, int], None] = lambda done, total: None,
    tile: int = TILE,
    overlap: int = OVERLAP,
) -> Tensor:
    """Pictures [B, C, H, W] in [0, 1] -> upscaled [B, out_channels, H * scale, W * scale] in [0, 1]
    (float32, CPU), the model computing on ``device`` in float32, tile halved on running out of
    memory (see the module notes)."""
    x = pictures.to(device, torch.float32)
    count = [0, 0]  # tiles done, tiles in all (at this tile size)

    def done() -> None:
        count[0] += 1
        progress(count[0], count[1])
        check()

    while True:
        count[:] = [0, pictures.shape[0] * tile_count(x.shape[2], x.shape[3], tile, overlap)]
        try:
            check()
            with torch.inference_mode():
                out = tiled_scale(
                    x, model, scale=scale, out_channels=out_channels, tile=tile, overlap=overlap, done=done
                )
            return out.clamp(0.0, 1.0)
        except torch.OutOfMemoryError:
            tile //= 2
            if tile < SMALLEST_TILE:
                raise NotEnoughMemoryError(
                    "the upscale model ran out of memory even on small tiles",
                    why=f"tiles of {tile * 2} x {tile * 2} pixels did not fit on {device}",
                    fix="Free memory on the device (unload other models) or upscale on the CPU",
                ) from None
