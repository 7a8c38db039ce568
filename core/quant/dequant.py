"""GGML block dequantization in torch: pure, vectorised over blocks, on any device.

Each function takes the raw bytes of ``n`` blocks as a ``(n, block_bytes)`` uint8 tensor and
returns ``(n, block)`` float32 values. The arithmetic is the format's, done in float32 with the same
operations in the same order as gguf-py's numpy reference, so the results are identical to the
bit (``tests/core/quant/test_dequant.py`` checks every type against it). Scales are read by viewing
two bytes as float16; sub-byte fields are split with shifts and masks on uint8.

Block layouts (QK_K = 256 elements for the K types):

- Q8_0: f16 d, 32 x int8 q; w = q * d
- Q4_0 / Q4_1: f16 d, (f16 m), 16 bytes of nibbles (low nibbles are elements 0-15, high 16-31);
  w = d * (q - 8)  /  w = d * q + m
- Q5_0 / Q5_1: as Q4 plus 4 bytes holding the fifth bit of each element (bit j of the
  little-endian u32 for element j); w = d * (q - 16)  /  w = d * q + m
- Q2_K: 16 bytes of 4-bit scale/min pairs, 64 bytes of 2-bit q, f16 d, f16 dmin;
  w = (d * sc) * q - dmin * m per 16 elements
- Q3_K: 32 bytes high-bit mask, 64 bytes 2-bit q, 12 bytes of 6-bit scales, f16 d;
  w = (d * (sc - 32)) * (q - 4 * (1 - hbit))
- Q4_K / Q5_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32,
  (Q5_K: 32 bytes of fifth bits), 128 bytes of nibbles; w = (d * sc) * q - dmin * m
- Q6_K: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 int8 scales, f16 d;
  w = (d * sc) * (q - 32)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from core.quant.gguf_types import BY_NAME

QK_K = 256


def _shifts(count: int, step: int, like: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The bit shifts ``0, step, 2 * step, ...`` (``count`` of them) made on ``like``'s device
    itself: a ``torch.tensor(list, device=...)`` would copy from the host and wait for the card on
    every layer (``tests/core/test_no_hidden_syncs.py``). Allocated from the stored bytes, like
    every buffer of a decode: what a layer makes from its weight is weight-made, never counted as
    activations (``core.memory.tracking``)."""
    out = like.new_empty(count, dtype=torch.uint8)
    return torch.arange(0, count * step, step, out=out).reshape(shape)


def _f16(blocks: Tensor, start: int) -> Tensor:
    """The float16 at byte ``start`` of every block, as an ``(n, 1)`` float32 tensor."""
    return blocks[:, start : start + 2].contiguous().view(torch.float16).to(torch.float32)


def _nibbles(qs: Tensor, groups: int, width: int) -> Tensor:
    """Split ``(n, groups * width)`` bytes into ``(n, groups, 2, width)`` low/high nibbles."""
    n = qs.shape[0]
    out = qs.reshape(n, groups, 1, width) >> _shifts(2, 4, qs, (1, 1, 2, 1))
    return out & 0x0F


def _bits(bytes_: Tensor, groups: int, width: int, count: int, step: int, mask: int) -> Tensor:
    """``(n, groups * width)`` bytes -> ``(n, groups, count, width)`` fields of ``step`` bits."""
    n = bytes_.shape[0]
    shifts = _shifts(count, step, bytes_, (1, 1, count, 1))
    return (bytes_.reshape(n, groups, 1, width) >> shifts) & mask


def q8_0(blocks: Tensor) -> Tensor:
    d = _f16(blocks, 0)
    x = blocks[:, 2:].contiguous().view(torch.int8).to(torch.float32)
    return x * d


def q4_0(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    q = _nibbles(blocks[:, 2:], 1, 16).reshape(n, 32).to(torch.int8) - 8
    return d * q.to(torch.float32)


def q4_1(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    q = _nibbles(blocks[:, 4:], 1, 16).reshape(n, 32).to(torch.float32)
    return (d * q) + m


def _fifth_bits(qh: Tensor) -> Tensor:
    """4 bytes per block -> the 32 bits of the little-endian u32, element order."""
    n = qh.shape[0]
    return _bits(qh, 4, 1, 8, 1, 1).reshape(n, 4, 8).reshape(n, 32)


def q5_0(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    d = _f16(blocks, 0)
    qh = _fifth_bits(blocks[:, 2:6])
    ql = _nibbles(blocks[:, 6:], 1, 16).reshape(n, 32)
    q = (ql | (qh << 4)).to(torch.int8) - 16
    return d * q.to(torch.float32)


def q5_1(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    qh = _fifth_bits(blocks[:, 4:8])
    ql = _nibbles(blocks[:, 8:], 1, 16).reshape(n, 32)
    q = (ql | (qh << 4)).to(torch.float32)
    return (d * q) + m


def q2_k(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    scales = blocks[:, : QK_K // 16]
    qs = blocks[:, QK_K // 16 : QK_K // 16 + QK_K // 4]
    d = _f16(blocks, 80)
    dmin = _f16(blocks, 82)
    dl = (d * (scales & 0x0F).to(torch.float32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).to(torch.float32)).reshape(n, 16, 1)
    q = _bits(qs, 2, 32, 4, 2, 3).reshape(n, 16, 16).to(torch.float32)
    return (dl * q - ml).reshape(n, QK_K)


def q3_k(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    hmask = blocks[:, :32]
    qs = blocks[:, 32:96]
    packed = blocks[:, 96:108]
    d = _f16(blocks, 108)
    low = (packed[:, :8].reshape(n, 1, 8) >> _shifts(2, 4, blocks, (1, 2, 1))).reshape(n, 16)
    high = (packed[:, 8:].reshape(n, 1, 4) >> _shifts(4, 2, blocks, (1, 4, 1))).reshape(n, 16)
    sc = (low & 0x0F) | ((high & 0x03) << 4)
    sc_f = (sc.to(torch.int8) - 32).to(torch.float32)
    dl = (d * sc_f).reshape(n, 16, 1)
    ql = _bits(qs, 2, 32, 4, 2, 3).reshape(n, 16, 16)
    qh = _bits(hmask, 1, 32, 8, 1, 1).reshape(n, 16, 16) ^ 1
    q = (ql.to(torch.int8) - (qh << 2).to(torch.int8)).to(torch.float32)
    return (dl * q).reshape(n, QK_K)


def _scale_min_k4(packed: Tensor) -> tuple[Tensor, Tensor]:
    """12 bytes of 6-bit scales and mins (Q4_K/Q5_K) -> ``(n, 8)`` scales and mins (uint8)."""
    n = packed.shape[0]
    rows = packed.reshape(n, 3, 4)
    d, m, md = rows[:, 0], rows[:, 1], rows[:, 2]
    sc = torch.cat([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], dim=-1)
    mn = torch.cat([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], dim=-1)
    return sc, mn


def _k4_scales(blocks: Tensor) -> tuple[Tensor, Tensor]:
    n = blocks.shape[0]
    d, dmin = _f16(blocks, 0), _f16(blocks, 2)
    sc, mn = _scale_min_k4(blocks[:, 4:16])
    dl = (d * sc.to(torch.float32)).reshape(n, 8, 1)
    ml = (dmin * mn.to(torch.float32)).reshape(n, 8, 1)
    return dl, ml


def q4_k(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    dl, ml = _k4_scales(blocks)
    q = _nibbles(blocks[:, 16:], 4, 32).reshape(n, 8, 32).to(torch.float32)
    return (dl * q - ml).reshape(n, QK_K)


def q5_k(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    dl, ml = _k4_scales(blocks)
    qh = _bits(blocks[:, 16:48], 1, 32, 8, 1, 1).reshape(n, 8, 32)
    ql = _nibbles(blocks[:, 48:], 4, 32).reshape(n, 8, 32)
    q = (ql | (qh << 4)).to(torch.float32)
    return (dl * q - ml).reshape(n, QK_K)


def q6_k(blocks: Tensor) -> Tensor:
    n = blocks.shape[0]
    ql = _nibbles(blocks[:, :128], 2, 64).reshape(n, 8, 32)
    qh = _bits(blocks[:, 128:192], 2, 32, 4, 2, 3).reshape(n, 8, 32)
    scales = blocks[:, 192:208].contiguous().view(torch.int8).to(torch.float32)
    d = _f16(blocks, 208)
    dl = (d * scales).reshape(n, 16, 1)
    q = ((ql | (qh << 4)).to(torch.int8) - 32).reshape(n, 16, 16).to(torch.float32)
    return (dl * q).reshape(n, QK_K)


BLOCK_DEQUANT: dict[str, Callable[[Tensor], Tensor]] = {
    "Q8_0": q8_0,
    "Q4_0": q4_0,
    "Q4_1": q4_1,
    "Q5_0": q5_0,
    "Q5_1": q5_1,
    "Q2_K": q2_k,
    "Q3_K": q3_k,
    "Q4_K": q4_k,
    "Q5_K": q5_k,
    "Q6_K": q6_k,
}


#: Elements dequantized at once into a narrower target dtype (1 Mi: 4 MiB of float32 values,
#: ~13 MiB of temporaries for Q4_K; ``bench/transients.py`` measured the whole-weight peaks).
CHUNK_ELEMENTS = 1 << 20


def dequantize(
    raw: Tensor,
    qtype: str,
    shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """The ``shape`` tensor that ``raw`` (uint8 bytes of ``qtype`` blocks, row-major) encodes, in
    ``dtype`` on ``device`` (default: where ``raw`` is). Computed in float32 on that device, then
    cast (in chunks of :data:`CHUNK_ELEMENTS` when ``dtype`` is narrower): the same bytes give
    the same bits on every path."""
    fn = BLOCK_DEQUANT.get(qtype)
    if fn is None:
        raise ValueError(f"cannot dequantize GGML type {qtype}")
    spec = BY_NAME[qtype]
    flat = raw.reshape(-1)
    if device is not None and flat.device != torch.device(device):
        flat = flat.to(device)
    numel = 1
    for s in shape:
        numel *= s
    if numel % spec.block or flat.numel() != spec.nbytes(numel):
        raise ValueError(
            f"{flat.numel()} bytes of {qtype} cannot hold a {tuple(shape)} tensor "
            f"({spec.block} elements per {spec.block_bytes}-byte block)"
        )
    blocks = flat.reshape(-1, spec.block_bytes)
    per_chunk = max(1, CHUNK_ELEMENTS // spec.block)
    if dtype == torch.float32 or blocks.shape[0] <= per_chunk:
        values = fn(blocks).reshape(shape)
        return values if dtype == torch.float32 else values.to(dtype)
    # A narrower target: chunks of blocks, each computed in float32 and cast into the output, so
    # the float32 values and the formulas' temporaries (8-12 bytes an element for the K types)
    # exist for one chunk at a time, not the whole weight. Every element is computed by the same
    # operations as in one piece (no reduction crosses a block): the same bits.
    # the output is allocated from the stored bytes (a weight-made buffer, like the fp32 path's
    # values): the decoded weight is part of the layer's bytes in flight, not an activation
    out = blocks.new_empty(blocks.shape[0] * spec.block, dtype=dtype)
    for first in range(0, blocks.shape[0], per_chunk):
        part = blocks[first : first + per_chunk]
        out[first * spec.block : (first + part.shape[0]) * spec.block].copy_(fn(part).reshape(-1))
    return out.reshape(shape)
