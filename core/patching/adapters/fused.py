"""Baking a stack of plain LoRAs into one weight, block by block in cache-sized buffers.

The common bake (one or more LoRA/LoCon files on a checkpoint) is, per weight and LoRA in order,
``W += c * (up @ down)`` in float32 with ``c = strength * alpha / rank``, then one cast back to the
weight's dtype: the operations and roundings of ComfyUI's bake (a float32 product, scaled by the
scalar, added to a float32 copy of the weight), so the result is the same, bit for bit, on the same
BLAS. Done whole-weight, as ComfyUI does, each weight costs a float32 copy, a float32 product, a
scaled copy of it, the sum and the cast: five passes over memory at 4 bytes an element, each on
freshly allocated (page-faulted) memory. Here the weight is processed a block of rows at a time
in two reused float32 buffers (a few MiB, they stay in the CPU's cache): convert the block in,
``mm`` each LoRA's rows of ``up`` with ``down`` into the second buffer, scale it, add it, and cast
the block into the output. Main memory sees the weight read once and the output written once, and
nothing the size of a weight is allocated but the output (the factors are the cache: they are
small). Each output element is the same dot product over the rank as in a whole-matrix ``mm``.

Every bake of such a stack goes through ``apply_patches`` and so through here: the ``ModelPatcher``
bake, the streamed (lowvram) patch at cast time and the mover's placed copies, so a baked weight
and a streamed one are bit-identical. The row blocks depend on the weight's shape only.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from core.patching.adapters.base import flat
from core.patching.adapters.lora import LoConAdapter, LoRAAdapter

if TYPE_CHECKING:
    from core.patching.adapters.slices import Patch

#: Bytes of each intermediate-dtype block buffer. Larger blocks make the GEMM more efficient (more
#: rows per call) until they fall out of cache: on a 2-core EPYC (1 MiB L2, 32 MiB L3) a
#: 1280 x 11520 conv weight baked in 28 ms with 2 MiB, 30 with 1 MiB, 38 with 512 KiB, 60 with 256.
BLOCK_BYTES = 1 << 21


_local = threading.local()


def _buffer(numel: int, dtype: torch.dtype) -> Tensor:
    """This thread's block buffers (kept: a bake calls here once per weight, and allocating and
    freeing a few MiB each time churns the allocator)."""
    held: Tensor | None = getattr(_local, "buffer", None)
    if held is None or held.dtype != dtype or held.numel() < numel:
        # a normal tensor even when first asked for under inference mode (a streamed layer patched
        # during a run): an inference tensor could not be written by a later bake outside it
        with torch.inference_mode(False):
            held = _local.buffer = torch.empty(max(numel, 2 * BLOCK_BYTES // dtype.itemsize), dtype=dtype)
    return held[:numel]


#: Elements of one row block baked at once on an accelerator (16 MiB of float32).
DEVICE_BLOCK_ELEMENTS = 1 << 22


def _bake_on_device(
    flat_w: Tensor, terms: list[tuple[float, Tensor, Tensor, int]], dtype: torch.dtype
) -> Tensor:
    rows, cols = flat_w.shape
    out = torch.empty((rows, cols), dtype=flat_w.dtype, device=flat_w.device)
    block = max(1, min(rows, DEVICE_BLOCK_ELEMENTS // max(1, cols)))
    for first in range(0, rows, block):
        last = min(rows, first + block)
        work = flat_w[first:last].to(dtype, copy=True)
        for c, up, down, start in terms:
            lo, hi = max(first, start), min(last, start + up.shape[0])
            if lo < hi:
                work[lo - first : hi - first].add_((up[lo - start : hi - start] @ down).mul_(c))
        out[first:last].copy_(work)
    return out


def fusable(weight: Tensor, patches: Sequence[Patch]) -> bool:
    """True when every patch is a plain LoRA/LoCon (no DoRA) on the whole weight or on a slice of
    its rows: the stack this module bakes. Shapes are checked by the caller."""
    if weight.ndim == 0 or not patches:
        return False
    for p in patches:
        a = p.adapter
        if type(a) not in (LoRAAdapter, LoConAdapter):
            return False
        assert isinstance(a, LoRAAdapter)
        if a.dora_scale is not None:
            return False
        if p.offset is not None and p.offset[0] not in (0, -weight.ndim):
            return False
    return True


def _down(adapter: LoRAAdapter, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``down`` as a ``[rank, in * kernel]`` matrix (a Tucker ``mid`` contracted in first)."""
    down = flat(adapter.down).to(device=device, dtype=dtype)
    if adapter.mid is None:
        return down
    mid = adapter.mid.to(device=device, dtype=dtype)
    # mid [r_up, r_down, kh, kw] x down [r_down, in] -> [r_up, in, kh, kw], flattened
    return flat(torch.einsum("i j ..., j c -> i c ...", mid, down))


def bake_lora_stack(weight: Tensor, patches: Sequence[Patch], intermediate_dtype: torch.dtype) -> Tensor:
    """The weight with every (``fusable``) patch added in order; a new tensor of the weight's
    dtype, device and shape. ``weight`` is never mutated."""
    rows = weight.shape[0]
    flat_w = weight.reshape(rows, -1)
    cols = flat_w.shape[1]
    device = weight.device
    terms: list[tuple[float, Tensor, Tensor, int]] = []  # (c, up, down, first weight row)
    for p in patches:
        if p.strength == 0:
            continue
        a = p.adapter
        assert isinstance(a, LoRAAdapter)
        up = flat(a.up).to(device=device, dtype=intermediate_dtype)
        start = 0 if p.offset is None else p.offset[1]
        terms.append((float(p.strength) * a.scale, up, _down(a, intermediate_dtype, device), start))
    if not terms:
        return weight.clone()
    if device.type != "cpu":
        # On an accelerator large kernels beat many small ones, but a whole-weight float32 copy
        # and product held 4-5x the weight on the card beside it (a 72 MiB bf16 Flux weight:
        # 289 MiB, uncounted by the plan): row blocks of DEVICE_BLOCK_ELEMENTS bound it.
        return _bake_on_device(flat_w, terms, intermediate_dtype).reshape(weight.shape)
    out = torch.empty((rows, cols), dtype=weight.dtype)
    block = max(1, min(rows, BLOCK_BYTES // max(1, cols * intermediate_dtype.itemsize)))
    buffer = _buffer(2 * block * cols, intermediate_dtype).view(2, block, cols)
    for first in range(0, rows, block):
        last = min(rows, first + block)
        work, product = buffer[0, : last - first], buffer[1]
        work.copy_(flat_w[first:last])
        for c, up, down, start in terms:
            lo, hi = max(first, start), min(last, start + up.shape[0])
            if lo < hi:
                rows_product = product[: hi - lo]
                torch.mm(up[lo - start : hi - start], down, out=rows_product)
                work[lo - first : hi - first].add_(rows_product.mul_(c))
        out[first:last].copy_(work)
    return out.reshape(weight.shape)
