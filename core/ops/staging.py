"""Pinned staging for streamed layers: a few reusable page-locked buffers, never one per layer.

A copy to a GPU runs asynchronously, at full bus speed, only from page-locked (pinned) host
memory; from pageable memory (a memory-mapped file's pages) the driver copies through its own
small pinned bounce buffer and the CPU waits for each layer. Pinning every streamed layer instead
(``Tensor.pin_memory()``) copies it -- a memory-mapped model's RAM doubles --, the pinned
allocator rounds each block up to a power of two, freed blocks stay locked, and one failed pin
(Windows caps pinned memory; ComfyUI users meet it) fails the whole load.

A :class:`StagingRing` holds ``count`` (default 2) pinned buffers, each the size of the largest
streamed layer (weight and bias packed together). A layer's copy takes the next buffer in turn:
its bytes are copied into it on the CPU, the asynchronous device copy is issued from it, and an
event recorded after that copy marks the buffer busy. A buffer is reused only once its event
completed (``query``; else ``synchronize`` on it, counted in :attr:`StagingRing.waits`): with two
buffers, layer ``i + 2`` waits at most for layer ``i``'s copy, which prefetching started long
before. When the buffers cannot be pinned, or do not fit the pinned-memory cap,
:func:`build_ring` says why and the caller streams from pageable memory (the load never fails
for it).

The host side is a seam (:class:`StagingBackend`): :class:`CudaStaging` in the app, a fake in the
tests, which check the reuse rule and the fallback on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from core.units import in_mib

#: Offsets inside a buffer are kept to this alignment (the CUDA allocator's), so a view of any
#: dtype starts on a boundary the copy engine moves at full speed.
PACK_ALIGNMENT = 512


class Event(Protocol):
    def query(self) -> bool: ...
    def synchronize(self) -> None: ...


class StagingBackend(Protocol):
    """Where pinned buffers and copy events come from."""

    def pinned(self, nbytes: int) -> Tensor:
        """A page-locked uint8 host buffer of ``nbytes``; raises when it cannot be pinned."""
        ...

    def record(self, stream: torch.cuda.Stream | None) -> Event:
        """An event recorded on ``stream`` (None: the current stream) after the copies issued."""
        ...


class CudaStaging:
    """The real backend: ``torch.empty(pin_memory=True)`` and CUDA events."""

    def pinned(self, nbytes: int) -> Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def record(self, stream: torch.cuda.Stream | None) -> Event:
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(stream)
        return event


def packed_bytes(tensors: list[Tensor | None]) -> int:
    """Bytes one buffer needs to hold ``tensors`` one after the other at aligned offsets."""
    total = 0
    for t in tensors:
        if t is not None:
            total = _aligned(total) + t.numel() * t.element_size()
    return total


def _aligned(n: int) -> int:
    return -(-n // PACK_ALIGNMENT) * PACK_ALIGNMENT


@dataclass
class _Slot:
    buffer: Tensor
    event: Event | None = None


class StagingRing:
    """``count`` pinned buffers of ``slot_bytes`` each, reused in turn (see the module notes).
    Building it allocates them; a backend that cannot pin raises out of the constructor."""

    def __init__(self, slot_bytes: int, count: int = 2, backend: StagingBackend | None = None) -> None:
        if count < 1 or slot_bytes < 1:
            raise ValueError(f"a staging ring needs at least one buffer of at least one byte, not {count}")
        self.backend: StagingBackend = backend if backend is not None else CudaStaging()
        self.slot_bytes = slot_bytes
        self._slots = [_Slot(self.backend.pinned(slot_bytes)) for _ in range(count)]
        self._next = 0
        self.waits = 0  # reuses that had to wait for the buffer's previous copy
        self.staged = 0  # layers staged

    @property
    def nbytes(self) -> int:
        return self.slot_bytes * len(self._slots)

    def owns(self, t: Tensor) -> bool:
        """Whether ``t`` is a view of one of the buffers (a test and the tracer ask)."""
        ptr = t.untyped_storage().data_ptr()
        return any(ptr == s.buffer.untyped_storage().data_ptr() for s in self._slots)

    def stage(self, tensors: list[Tensor | None]) -> tuple[list[Tensor | None], _Slot]:
        """Host copies of ``tensors`` in the next free buffer (waiting for its previous copy when
        that has not completed) and the slot to :meth:`issued` once the device copy is issued."""
        need = packed_bytes(tensors)
        if need > self.slot_bytes:
            raise ValueError(f"{need} bytes do not fit a {self.slot_bytes}-byte staging buffer")
        slot = self._slots[self._next]
        self._next = (self._next + 1) % len(self._slots)
        if slot.event is not None and not slot.event.query():
            slot.event.synchronize()
            self.waits += 1
        slot.event = None
        out: list[Tensor | None] = []
        offset = 0
        for t in tensors:
            if t is None:
                out.append(None)
                continue
            offset = _aligned(offset)
            n = t.numel() * t.element_size()
            view = slot.buffer[offset : offset + n].view(t.dtype).view(t.shape)
            view.copy_(t)
            out.append(view)
            offset += n
        self.staged += 1
        return out, slot

    def issued(self, slot: _Slot, stream: torch.cuda.Stream | None) -> None:
        """The device copies from ``slot`` are issued on ``stream``: the slot is busy until then."""
        slot.event = self.backend.record(stream)


def build_ring(
    largest: int, cap: int, count: int = 2, backend: StagingBackend | None = None
) -> tuple[StagingRing | None, str]:
    """A ring for layers of at most ``largest`` packed bytes within ``cap`` pinned bytes, or None
    and the sentence saying why streaming uses pageable memory instead."""
    if largest <= 0:
        return None, "nothing streams"
    if largest * count > cap:
        return None, (
            f"pinning skipped: {count} staging buffers of {in_mib(largest)} exceed the pinned-memory "
            f"cap of {in_mib(cap)}; streaming from pageable memory"
        )
    try:
        return StagingRing(largest, count, backend), ""
    except (RuntimeError, OSError, MemoryError) as exc:
        return None, f"pinning failed: {exc}; streaming from pageable memory"
