"""Where a weight sits in memory must never change what it computes.

CPU kernels pick their vector path from the address of their operands: a one-row ``F.linear``
(matrix-vector) on an AVX-512 machine peels a different head off a weight whose address is not
16-byte aligned and so sums in another order; 12 of the 16 four-byte offsets inside a 64-byte line
give other bits than an aligned copy of the same values. Whole-model placement makes two copies of
one weight all the time: a resident layer on the CPU computes with the file's memory-mapped view
(its address is the file offset's, often not a multiple of 64), a streamed layer with a fresh copy
made at every forward. Left alone the two disagree in the last bit.

The rule that makes every placement compute the same bits, by construction:

* **A copy made on the device its source lives on keeps the source's address modulo**
  :data:`ALIGNMENT` (:func:`copy_keeping_alignment`). 64 bytes is what torch's CPU allocator
  guarantees (c10's ``gAlignment``): no CPU kernel can depend on more than that without giving
  other bits for two fresh allocations of the same tensor, so two operands that agree modulo 64
  take the same path. The copy costs at most ``ALIGNMENT - 1`` extra bytes and no time.
* **A copy to another device is a fresh allocation of that device** (the CUDA caching allocator
  hands out 512-byte-aligned blocks): resident and streamed layers both make their device copies
  that way, so both compute with aligned device tensors whatever the host address was. A pinned
  staging copy is only read by the copy engine, which moves bytes exactly; its address never
  reaches a kernel.
* **A computed weight (a LoRA-patched weight, a dtype cast) is a fresh allocation in every path.**
  Elementwise work (casts, adding a LoRA delta) gives the same bits at any address.

Resident weights therefore stay zero-copy views of the file whatever its offsets; making them
aligned instead would copy every tensor of most downloaded files (see docs/benchmarks.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Address residue (bytes) that placement preserves: torch's CPU allocator alignment, the widest
#: vector (AVX-512) and the cache line of x86 CPUs.
ALIGNMENT = 64


def residue(t: Tensor) -> int:
    """The address of ``t``'s first element modulo :data:`ALIGNMENT`."""
    return int(t.data_ptr()) % ALIGNMENT


def copy_keeping_alignment(t: Tensor, *, modulus: int = ALIGNMENT) -> Tensor:
    """A fresh contiguous copy of ``t`` on its own device whose first element sits at the same
    address modulo ``modulus`` as ``t``'s. Costs at most ``modulus - 1`` bytes more than the copy.

    A non-contiguous ``t`` (never a weight read from a file) gets a plain contiguous copy: its
    strides, not its address, decide the kernel path then."""
    t = t.detach()
    if t.numel() == 0 or not t.is_contiguous() or modulus <= 1:
        return t.clone(memory_format=torch.contiguous_format)
    if int(t.data_ptr()) % modulus == 0 and modulus <= ALIGNMENT:
        return torch.empty_like(t).copy_(t)  # the allocator's own alignment is the residue
    n, size = t.numel(), t.element_size()
    buf = torch.empty(n + modulus // size, dtype=t.dtype, device=t.device)
    # a whole number of elements: both addresses are multiples of the element size (the source's
    # by the file reader's rule, the allocator's base by its alignment)
    shift = ((int(t.data_ptr()) - int(buf.data_ptr())) % modulus) // size
    return buf[shift : shift + n].view(t.shape).copy_(t)


def copy_for_compute(t: Tensor, device: torch.device, *, non_blocking: bool = False) -> Tensor:
    """A fresh copy of ``t`` on ``device`` made the way every placement makes it: on ``t``'s own
    device at ``t``'s address residue; on another device a fresh allocation of that device."""
    if t.device == device:
        return copy_keeping_alignment(t)
    return t.detach().to(device=device, copy=True, non_blocking=non_blocking)
