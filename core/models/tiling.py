"""Tiled application of image-to-image functions (VAE encode/decode) with feathered blending."""

from __future__ import annotations

from collections.abc import Callable

import torch

Progress = Callable[[int, int], None]
"""Called with (tiles done, tiles in all) after each tile."""


def _starts(size: int, tile: int, stride: int) -> list[int]:
    if size <= tile:
        return [0]
    return sorted({*range(0, size - tile, stride), size - tile})


def _ramp(length: int, feather: int, before: bool, after: bool) -> torch.Tensor:
    w = torch.ones(length)
    f = min(feather, length // 2)
    m = f // 4  # the outermost pixels of a tile feel its zero padding most: they get no weight
    if f > 0:
        up = torch.zeros(f)
        up[m:] = torch.arange(1, f - m + 1, dtype=torch.float32) / (f - m + 1)
        if before:
            w[:f] = up
        if after:
            w[length - f :] = up.flip(0)
    return w


def tiled_map(
    x: torch.Tensor,
    fn: Callable[[torch.Tensor], torch.Tensor],
    *,
    tile: int,
    overlap: int,
    up: int = 1,
    down: int = 1,
    progress: Progress | None = None,
) -> torch.Tensor:
    """Apply ``fn`` (which scales H and W by ``up / down``) to overlapping tiles of ``x`` (N, C, H, W)
    and blend the results with linear feathers across each overlap, so seams vanish.

    ``tile`` and ``overlap`` are in input units and rounded down to multiples of ``down``. Peak memory
    is one tile's worth of ``fn`` plus the float32 output accumulator.
    """
    tile, overlap = tile // down * down, overlap // down * down
    if tile <= 0 or not 0 <= overlap < tile:
        raise ValueError(f"need 0 <= overlap < tile (both >= {down}), got tile={tile}, overlap={overlap}")
    n, _, h, w = x.shape
    if h % down or w % down:
        raise ValueError(f"tiled input of {h}x{w} is not a multiple of {down} on each side")
    ys, xs = _starts(h, tile, tile - overlap), _starts(w, tile, tile - overlap)
    total, done = len(ys) * len(xs), 0
    out: torch.Tensor | None = None
    weight = torch.zeros(h * up // down, w * up // down, device=x.device)
    feather = overlap * up // down
    for y0 in ys:
        for x0 in xs:
            th, tw = min(tile, h - y0), min(tile, w - x0)
            res = fn(x[:, :, y0 : y0 + th, x0 : x0 + tw])
            oy, ox, oh, ow = y0 * up // down, x0 * up // down, res.shape[2], res.shape[3]
            if out is None:
                out = torch.zeros(n, res.shape[1], *weight.shape, device=x.device, dtype=torch.float32)
            wy = _ramp(oh, feather, y0 > 0, y0 + th < h).to(x.device)
            wx = _ramp(ow, feather, x0 > 0, x0 + tw < w).to(x.device)
            mask = wy[:, None] * wx[None, :]
            out[:, :, oy : oy + oh, ox : ox + ow] += res.float() * mask
            weight[oy : oy + oh, ox : ox + ow] += mask
            done += 1
            if progress is not None:
                progress(done, total)
    assert out is not None
    return (out / weight).to(x.dtype)
