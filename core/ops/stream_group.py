"""The group of layers one ``stream_layers`` call streams, and what they copied.

:class:`StreamedLayers` holds the shared side stream (CUDA), the staging buffers, the order the
layers run in (learned on the first forward, for prefetching) and the :class:`StreamStats` the run
report reads. The per-layer mechanics are ``core.ops.streaming.LayerStream``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from core.ops.staging import StagingRing

if TYPE_CHECKING:
    from core.ops.streaming import LayerStream


@dataclass
class StreamStats:
    """What the streamed layers of one :class:`StreamedLayers` copied, for the run report."""

    bytes_total: int = 0
    casts: int = 0  # layer forwards served by streaming
    patched: int = 0  # of which a patch changed the weight or bias
    prefetched: int = 0  # of which the copy had been started ahead
    forwards: int = 0  # forwards finished
    last_forward_bytes: int = 0
    max_forward_bytes: int = 0
    current_forward_bytes: int = 0

    def record(self, nbytes: int, *, patched: bool, prefetched: bool) -> None:
        self.bytes_total += nbytes
        self.current_forward_bytes += nbytes
        self.casts += 1
        self.patched += int(patched)
        self.prefetched += int(prefetched)

    def end_forward(self) -> int:
        """Close the current forward; returns the bytes it streamed (0 and nothing counted when
        no streamed layer ran)."""
        n = self.current_forward_bytes
        if n == 0:
            return 0
        self.forwards += 1
        self.last_forward_bytes = n
        self.max_forward_bytes = max(self.max_forward_bytes, n)
        self.current_forward_bytes = 0
        return n

    @property
    def mean_forward_bytes(self) -> float:
        return (self.bytes_total - self.current_forward_bytes) / self.forwards if self.forwards else 0.0


class StreamedLayers:
    """The layers one :func:`stream_layers` call streams: their shared side stream (CUDA), the order
    they run in (learned on the first forward, for prefetching) and their :class:`StreamStats`."""

    def __init__(
        self,
        device: torch.device,
        side: torch.cuda.Stream | None,
        prefetch: bool,
        staging: StagingRing | None = None,
    ) -> None:
        self.device = device
        self.side_stream = side
        self.prefetch = prefetch
        self.staging = staging  # pinned buffers host copies go through (None: pageable copies)
        self.stats = StreamStats()
        self.layers: dict[str, LayerStream] = {}
        self._order: list[LayerStream] = []
        self._position: dict[int, int] = {}  # id(LayerStream) -> index in _order
        self._seen: set[int] = set()  # layers run in the current forward
        self._order_known = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.layers)

    @property
    def streamed_bytes(self) -> int:
        """Bytes one forward copies (every streamed layer once)."""
        return sum(s.nbytes for s in self.layers.values())

    @property
    def pinned_bytes(self) -> int:
        return sum(s.pinned.nbytes for s in self.layers.values() if s.pinned is not None)

    @property
    def order(self) -> tuple[str, ...]:
        """The streamed layers in the order they ran (complete after the first forward)."""
        return tuple(s.key for s in self._order)

    def end_forward(self) -> int:
        """Close the current forward for the stats (call after each model call for exact counts;
        otherwise a forward closes when a streamed layer runs again)."""
        self._seen.clear()
        self._order_known = self._order_known or bool(self._order)
        return self.stats.end_forward()

    def drop_prefetched(self) -> int:
        """Free the copies started ahead (after a run or an interrupt, or before unloading);
        returns how many there were."""
        held = [s for s in self.layers.values() if s.staged is not None]
        for s in held:
            s.staged = None
        return len(held)

    def after_fetch(self, stream: LayerStream, device: torch.device) -> None:
        ident = id(stream)
        if ident in self._seen:  # the same layer again: a new forward began
            self.end_forward()
        self._seen.add(ident)
        if ident not in self._position:
            self._position[ident] = len(self._order)
            self._order.append(stream)
        if self.prefetch and device == self.device:
            self._prefetch_after(self._position[ident], device)

    def _prefetch_after(self, index: int, device: torch.device) -> None:
        following = index + 1
        if following >= len(self._order):
            if not self._order_known:
                return  # still learning the order: the next layer is unknown
            following = 0  # the first layer of the next forward
        target = self._order[following]
        if target.staged is None and not target.table:  # a table is looked up in place, never sent
            target.staged = target.copy_to(device, self.side_stream)

    def forget(self, stream: LayerStream) -> None:
        self.layers.pop(stream.key, None)
        self._order = [s for s in self._order if s is not stream]
        self._position = {id(s): i for i, s in enumerate(self._order)}
        self._seen.discard(id(stream))
