"""Memory-manager decisions as events, and a bounded, thread-safe log of them.

Every decision the manager takes (load, evict, stream, refuse...) becomes one ``MemoryEvent``
with the bytes it moved and a full human sentence saying why. The engine appends from its worker
thread; the app reads snapshots and subscribes listeners (plain callables, no Qt), which are
called on the appending thread, outside the log's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from core.units import GIB as GIB  # re-exported: the reasons' byte figures
from core.units import MIB as MIB
from core.units import gib as gib

#: ``dtype``: a model's storage/compute dtype decision where the user's setting asked for one
#: (fp8 matmul), logged beside the placements so every front end shows its reason
EventKind = Literal[
    "load", "partial_load", "unload", "partial_unload", "keep", "refuse", "interrupt", "dtype"
]
EVENT_KINDS: frozenset[str] = frozenset(
    ("load", "partial_load", "unload", "partial_unload", "keep", "refuse", "interrupt", "dtype")
)

Detail = int | float | str | bool | None
Listener = Callable[["MemoryEvent"], None]


_log = logging.getLogger(__name__)


def frozen_details(details: Mapping[str, Detail] | None) -> Mapping[str, Detail]:
    """A read-only copy, so a frozen event or plan step cannot be changed through its details."""
    return MappingProxyType(dict(details or {}))


@dataclass(frozen=True, kw_only=True)
class Shortfall:
    """The numbers of a refused placement, for the code that says what would fit instead.

    ``room_bytes``: the device bytes the model could have had (free + its own resident);
    ``stream_buffer_bytes``: the least stream buffers, were every module streamed; ``kept_bytes``:
    the fixed reserve kept free; ``activation_bytes``: the rest of the inference reserve.
    """

    room_bytes: int
    stream_buffer_bytes: int
    kept_bytes: int
    activation_bytes: int

    @property
    def activation_budget(self) -> int:
        """What was left for activations with every module streamed (negative: not even that)."""
        return self.room_bytes - self.stream_buffer_bytes - self.kept_bytes

    def details(self) -> dict[str, Detail]:
        """The same numbers under their event-log keys (the JSON contract)."""
        return {
            "room_bytes": self.room_bytes,
            "stream_buffer_bytes": self.stream_buffer_bytes,
            "kept_bytes": self.kept_bytes,
            "activation_bytes": self.activation_bytes,
        }


@dataclass(frozen=True)
class MemoryEvent:
    """One decision. ``bytes`` is what moved (0 for keep/refuse/interrupt); ``device_bytes_after``
    is the model's bytes on the device once the decision was carried out (None when unknown).

    ``details`` are the numbers the JSON log shows (written, never read back by key); what code
    reads is typed: ``shortfall`` on a refused placement (its numbers are in ``details`` too).
    """

    timestamp: float
    kind: EventKind
    model: str
    bytes: int
    device_bytes_after: int | None
    reason: str
    details: Mapping[str, Detail] = field(default_factory=lambda: frozen_details(None), hash=False)
    shortfall: Shortfall | None = None

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(
                f"unknown memory event kind {self.kind!r}; expected one of {sorted(EVENT_KINDS)}"
            )
        if self.bytes < 0:
            raise ValueError(f"a memory event moves a non-negative number of bytes, not {self.bytes}")
        object.__setattr__(self, "details", frozen_details(self.details))

    def to_json(self) -> dict[str, object]:
        return {
            "timestamp": self.timestamp,
            "kind": self.kind,
            "model": self.model,
            "bytes": self.bytes,
            "device_bytes_after": self.device_bytes_after,
            "reason": self.reason,
            "details": dict(self.details),
        }


class EventLog:
    """The last ``capacity`` events, oldest first.

    ``append`` is safe from any thread (a model's finalizer may run on whichever thread the
    garbage collector happens to run on, hence the re-entrant lock). Listeners are called after
    the event is stored, outside the lock; one that raises is logged and does not stop the others.
    """

    def __init__(self, capacity: int = 2000, *, clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 1:
            raise ValueError(f"an event log keeps at least one event, not {capacity}")
        self.capacity = capacity
        self.clock = clock
        self._events: deque[MemoryEvent] = deque(maxlen=capacity)
        self._listeners: list[Listener] = []
        self._total = 0
        self._lock = threading.RLock()

    def emit(
        self,
        kind: EventKind,
        model: str,
        nbytes: int,
        reason: str,
        *,
        device_bytes_after: int | None = None,
        details: Mapping[str, Detail] | None = None,
    ) -> MemoryEvent:
        """Build an event stamped with the log's clock, append it and return it."""
        event = MemoryEvent(
            self.clock(), kind, model, nbytes, device_bytes_after, reason, frozen_details(details)
        )
        self.append(event)
        return event

    def append(self, event: MemoryEvent) -> None:
        with self._lock:
            self._events.append(event)
            self._total += 1
            listeners = tuple(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                _log.exception("a memory event listener failed on %s", event.kind)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every later event; returns a function that unsubscribes."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self.unsubscribe(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop calling ``listener``; unknown listeners are ignored."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def events(self) -> tuple[MemoryEvent, ...]:
        """A snapshot of the kept events, oldest first."""
        with self._lock:
            return tuple(self._events)

    def since(self, count: int) -> tuple[MemoryEvent, ...]:
        """Events appended after the first ``count`` ever appended (those still kept): a reader
        remembers ``total`` and asks for what is new."""
        with self._lock:
            new = self._total - count
            if new <= 0:
                return ()
            return tuple(self._events)[-new:]

    @property
    def total(self) -> int:
        """How many events were ever appended (the ring keeps only the last ``capacity``)."""
        with self._lock:
            return self._total

    def clear(self) -> None:
        with self._lock:
            self._events.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)
