"""Where a merge computes and how much of a tensor it takes at once.

Without a memory manager the merge computes on the CPU, a slice of at most
:data:`HOST_CHUNK_BYTES` of working memory at a time (so the largest tensor of a checkpoint never
needs its float32 copies in RAM at once). With one (a GPU, or a card simulated on the CPU), it
asks the manager to free room for the largest tensor's working set -- evicting models as for any
load, each eviction an event -- and computes on the manager's device in slices that fit what the
card then has free, less its reserve. The arithmetic is element by element, so slicing changes no
bit of the result (``core.merging.arithmetic``).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.memory.manager import MemoryManager
from core.units import MIB

#: working memory of one slice on the CPU
HOST_CHUNK_BYTES = 256 * MIB
#: the smallest slice a card is given, whatever it has free (a few pages)
MIN_CHUNK_BYTES = 64 * 1024
#: float32 working copies per element besides the inputs and the output: the result, the other
#: model's float32 copy and its product by the strength (and B's copy for add-difference)
F32_COPIES = 3


@dataclass(frozen=True)
class Workspace:
    device: str
    chunk_bytes: int  # working memory one slice may take on ``device``

    def elements(self, bytes_per_element: int) -> int:
        return max(1, self.chunk_bytes // max(1, bytes_per_element))


def bytes_per_element(input_sizes: list[int], output_size: int, three_way: bool) -> int:
    """Working memory per element: each input's slice on the device, the float32 copies, the output."""
    return sum(input_sizes) + 4 * (F32_COPIES + int(three_way)) + output_size


def workspace(manager: MemoryManager | None, largest: int) -> Workspace:
    """The device and slice size for a merge whose largest tensor needs ``largest`` bytes of
    working memory whole."""
    if manager is None:
        return Workspace("cpu", HOST_CHUNK_BYTES)
    reserve = manager.settings.reserve_bytes
    free = manager.free_bytes()
    capacity = free + sum(info.device_bytes for info in manager.loaded())
    want = min(largest + reserve, capacity)  # a card smaller than the largest tensor: all of it
    if free < want:
        manager.free_memory(want)
    room = manager.free_bytes() - reserve
    return Workspace(manager.device, max(MIN_CHUNK_BYTES, min(room, largest)))
