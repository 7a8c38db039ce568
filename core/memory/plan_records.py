"""The records memory planning works on: settings, model states, steps and plans.

All frozen and all numbers; ``core.memory.planning`` holds the functions that produce them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from core.memory.events import GIB, MIB, Detail, EventKind, MemoryEvent, Shortfall, frozen_details, gib
from core.memory.vram_state import VramState

VRAM_STATES = tuple(s.value for s in VramState)
#: Module name standing for a whole model given without a module breakdown (moved as one block).
WHOLE = ""


@dataclass(frozen=True)
class PlanSettings:
    """The knobs planning needs (the policy layer maps its settings onto these).

    ``vram_state`` is a :class:`VramState` (a ``str``: "normal", "low_vram", ...); any spelling
    ``VramState.parse`` knows (ComfyUI's "NORMAL_VRAM", "lowvram") and Enum members (by name) are
    accepted and normalised."""

    vram_state: VramState = VramState.NORMAL_VRAM
    min_inference_bytes: int = int(0.8 * GIB) + 400 * MIB
    reserve_bytes: int = 400 * MIB
    headroom: float = 1.1
    low_vram_headroom: float = 1.3
    stream_buffers: int = 2
    #: the user (or the demo) fixed the inference headroom: ``min_inference_bytes`` then stands for
    #: the activations and no per-workload prediction is added. None: decided from the numbers (a
    #: floor above the reserve is someone's own figure), for settings built without a policy.
    headroom_fixed: bool | None = None

    def __post_init__(self) -> None:
        raw: object = self.vram_state
        if not isinstance(raw, VramState):
            object.__setattr__(
                self, "vram_state", VramState.parse(raw.name if isinstance(raw, Enum) else str(raw))
            )
        if self.headroom < 1 or self.low_vram_headroom < 1:
            raise ValueError("headroom factors are at least 1 (they only add a safety margin)")
        if min(self.min_inference_bytes, self.reserve_bytes, self.stream_buffers) < 0:
            raise ValueError("memory reserves and the stream buffer count cannot be negative")
        if self.headroom_fixed is None:
            object.__setattr__(self, "headroom_fixed", self.min_inference_bytes > self.reserve_bytes)

    @property
    def weight_headroom(self) -> float:
        return self.low_vram_headroom if self.vram_state == "low_vram" else self.headroom

    def inference_reserve(self, memory_required: int) -> int:
        """Device bytes kept free for activations while the models run."""
        return max(int(memory_required) + self.reserve_bytes, self.min_inference_bytes)


@dataclass(frozen=True)
class ModelState:
    """One model as planning sees it. ``module_sizes`` are its leaf weight groups (any order);
    without them the model is one block. ``last_used`` is a monotonic counter (higher = more recent)."""

    name: str
    total_bytes: int
    loaded_bytes: int = 0
    last_used: int = 0
    pinned_by_caller: bool = False
    module_sizes: tuple[tuple[str, int], ...] = ()
    loaded_modules: frozenset[str] = frozenset()
    #: modules that, streamed, send only the rows a forward looks up (embedding tables): nothing of
    #: their size is in flight on the device
    looked_up: frozenset[str] = frozenset()
    #: modules whose bytes in flight while streamed exceed their stored bytes (a GGUF or fp8
    #: layer is decoded on the device: ``core.memory.transients``): name -> bytes in flight
    inflight: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        sizes = dict(self.module_sizes)
        problems = []
        if self.total_bytes < 0 or not 0 <= self.loaded_bytes <= self.total_bytes:
            problems.append(f"loaded {self.loaded_bytes} of {self.total_bytes} bytes")
        if self.module_sizes:
            if len(sizes) != len(self.module_sizes) or min(sizes.values()) < 0:
                problems.append("module names must be unique and sizes non-negative")
            elif sum(sizes.values()) != self.total_bytes:
                problems.append(f"module sizes add up to {sum(sizes.values())}, not {self.total_bytes}")
            elif not self.loaded_modules <= sizes.keys():
                problems.append(f"unknown loaded modules {sorted(self.loaded_modules - sizes.keys())}")
            elif sum(sizes[n] for n in self.loaded_modules) != self.loaded_bytes:
                problems.append("loaded_bytes differs from the sizes of loaded_modules")
        elif self.loaded_bytes not in (0, self.total_bytes) or not self.loaded_modules <= {WHOLE}:
            problems.append("a model without modules is either fully loaded or not at all")
        if problems:
            raise ValueError(f"inconsistent model state for {self.name!r}: {'; '.join(problems)}")

    @property
    def modules(self) -> tuple[tuple[str, int], ...]:
        return self.module_sizes or ((WHOLE, self.total_bytes),)

    @property
    def flight(self) -> dict[str, int]:
        """Module -> bytes it has in flight on the device while streamed: 0 for looked-up tables,
        stored + decoded + scratch for the ``inflight`` ones, else the stored bytes."""
        more = dict(self.inflight)
        return {n: 0 if n in self.looked_up else max(s, more.get(n, s)) for n, s in self.modules}

    @property
    def resident(self) -> frozenset[str]:
        if self.module_sizes:
            return self.loaded_modules
        return frozenset({WHOLE}) if self.loaded_bytes else frozenset()

    @property
    def partially_loaded(self) -> bool:
        return 0 < self.loaded_bytes < self.total_bytes


@dataclass(frozen=True)
class Step:
    """One decision: move ``modules`` of ``model`` (to the device for load kinds, to the CPU for
    unload kinds), or nothing (keep, refuse). ``device_bytes_after`` is the model's resident bytes
    once the step is done."""

    kind: EventKind
    model: str
    bytes: int
    modules: tuple[str, ...]
    device_bytes_after: int
    reason: str
    details: Mapping[str, Detail] = field(default_factory=lambda: frozen_details(None), hash=False)
    #: a refuse step's numbers, typed (also in ``details``, for the log)
    shortfall: Shortfall | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "details", frozen_details(self.details))

    def to_event(
        self,
        timestamp: float,
        *,
        moved: int | None = None,
        device_bytes_after: int | None = None,
        **extra: Detail,
    ) -> MemoryEvent:
        """The event for this step once carried out: ``moved`` and ``device_bytes_after`` are what
        really happened (the planned figures when not given); ``extra`` goes into the details."""
        after = self.device_bytes_after if device_bytes_after is None else device_bytes_after
        details = {**self.details, "planned_bytes": self.bytes, **extra}
        nbytes = self.bytes if moved is None else moved
        return MemoryEvent(
            timestamp, self.kind, self.model, nbytes, after, self.reason, details, shortfall=self.shortfall
        )


@dataclass(frozen=True)
class FreePlan:
    steps: tuple[Step, ...]
    bytes_needed: int
    bytes_freed: int

    @property
    def possible(self) -> bool:
        return self.bytes_freed >= self.bytes_needed

    @property
    def shortfall_bytes(self) -> int:
        return max(0, self.bytes_needed - self.bytes_freed)

    def shortfall_reason(self, kept: Iterable[str] = (), goal: str = "") -> str:
        """``goal`` completes "Could not free N GiB..." (e.g. " to leave 4.00 GiB free")."""
        held = sorted(kept)
        tail = f"; {', '.join(held)} {'is' if len(held) == 1 else 'are'} in use" if held else ""
        return (
            f"Could not free {gib(self.bytes_needed)}{goal}: only {gib(self.bytes_freed)} could be moved "
            f"off the device, {gib(self.shortfall_bytes)} short{tail}."
        )


@dataclass(frozen=True)
class LoadPlan:
    model: str
    kind: EventKind  # load, partial_load, keep or refuse
    device_modules: tuple[str, ...]  # on the device once done, largest first
    to_load: tuple[str, ...]
    to_unload: tuple[str, ...]
    device_bytes: int
    streamed_bytes: int
    reserve_bytes: int
    buffer_bytes: int
    reason: str
    steps: tuple[Step, ...]
