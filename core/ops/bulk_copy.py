"""Loading a model's resident weights onto a GPU through two pinned buffers.

``tensor.to("cuda")`` from a memory-mapped file's pages is a copy from pageable memory: the driver
moves it through a small bounce buffer of its own while the CPU waits, one tensor at a time. The
first run on a real card (an H200, 2026-11-27) measured that path at 4.5 GB/s against 54.6 GB/s
from pinned memory (``bench/transfer.py``: 0.08 of the pinned figure, target 0.85).

:func:`copy_through_staging` sends host tensors through a :class:`~core.ops.staging.StagingRing`
instead: small tensors are packed together into one buffer, large ones cut into buffer-sized
pieces; each buffer is filled on the CPU (a multi-threaded copy) while the other one's
asynchronous copy to the device runs, and a buffer is refilled only once its copy completed (the
ring's rule). Every destination is a fresh device allocation, as ``.to`` makes it
(``core.ops.alignment``), so what the copies compute with is bit for bit what ``.to`` would give.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from core.ops.staging import PACK_ALIGNMENT, StagingRing

#: Bytes of each of the two staging buffers a load uses.
SLOT_BYTES = 32 << 20


def stageable(t: Tensor) -> bool:
    """Whether ``t`` can go through the staging buffers: a plain, contiguous, host tensor that is
    not pinned already (a quantized weight keeps its own moving rules)."""
    plain = type(t) in (Tensor, torch.nn.Parameter)
    return plain and t.device.type == "cpu" and t.is_contiguous() and not t.is_pinned()


def _pieces(tensors: Sequence[Tensor], dsts: Sequence[Tensor], limit: int) -> Iterator[tuple[Tensor, Tensor]]:
    """``(host bytes, device bytes)`` pairs of at most ``limit`` bytes each, in order."""
    for src, dst in zip(tensors, dsts, strict=True):
        if src.numel() == 0:
            continue
        host = src.reshape(-1).view(torch.uint8)
        device = dst.reshape(-1).view(torch.uint8)
        for start in range(0, host.numel(), limit):
            yield host[start : start + limit], device[start : start + limit]


def copy_through_staging(tensors: Sequence[Tensor], device: torch.device, ring: StagingRing) -> list[Tensor]:
    """Fresh copies of ``tensors`` (each :func:`stageable`) on ``device``, sent through ``ring``'s
    buffers; the copies are issued on the current stream (work queued after them sees them)."""
    dsts = [torch.empty(t.shape, dtype=t.dtype, device=device) for t in tensors]
    # a piece never fills a buffer past what packing may add for alignment
    limit = max(PACK_ALIGNMENT, ring.slot_bytes - PACK_ALIGNMENT)
    batch: list[tuple[Tensor, Tensor]] = []
    used = 0

    def send() -> None:
        staged, slot = ring.stage([host for host, _ in batch])
        for (_, dst), view in zip(batch, staged, strict=True):
            assert view is not None
            dst.copy_(view, non_blocking=True)
        ring.issued(slot, None)

    for host, dst in _pieces(tensors, dsts, limit):
        size = -(-host.numel() // PACK_ALIGNMENT) * PACK_ALIGNMENT
        if batch and used + size > ring.slot_bytes:
            send()
            batch, used = [], 0
        batch.append((host, dst))
        used += size
    if batch:
        send()
    return dsts
