"""The records of :mod:`core.patching.patcher`: a patch bound to a weight key, a patch set (one
adapter file at one strength), what ``apply()`` reports, and the applied state a patcher shares
with its clones."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torch import Tensor

from core.patching.adapters.base import Adapter
from core.patching.adapters.slices import Offset

#: A key's applied stack: ((set id, strength, index of the patch in the set), ...)
Signature = tuple[tuple[str, float, int], ...]


@dataclass(frozen=True)
class KeyPatch:
    """One adapter bound to one weight key (a slice of it for fused layers).

    ``function``, when given, transforms the (slice of the) weight right after this patch is
    added, in the intermediate dtype (e.g. re-quantising for a scaled format). ``pad_to``: the
    shape the weight is widened to, with zeros, before any patch of its stack is added (ComfyUI's
    ``reshape_weight``: a FLUX.1 control LoRA's img_in); taking the patch off restores the weight."""

    adapter: Adapter
    offset: Offset | None = None
    function: Callable[[Tensor], Tensor] | None = None
    pad_to: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PatchSet:
    """The patches of one adapter file on one model, at one strength; ``scales`` multiplies it
    for some keys (LoRA block weights: a block's keys at that block's share of the strength)."""

    id: str
    patches: Mapping[str, tuple[KeyPatch, ...]]  # weight key -> its patches from this file
    strength: float = 1.0
    enabled: bool = True
    scales: Mapping[str, float] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.enabled and self.strength != 0

    def strength_of(self, key: str) -> float:
        """The strength ``key`` is patched at (the set's, times the key's block weight)."""
        scale = self.scales.get(key)
        return self.strength if scale is None else self.strength * scale

    def patches_key(self, key: str) -> bool:
        """Whether this set changes ``key`` now (enabled, in the set, at a strength other than 0)."""
        return self.active and key in self.patches and self.strength_of(key) != 0


@dataclass(frozen=True)
class ApplyReport:
    recomputed: int  # keys whose weight was rebuilt
    restored: int  # keys set back to their original
    unchanged: int  # patched keys that were already right
    cached_deltas: int  # recomputed keys that used cached deltas only
    seconds: float


@dataclass
class AppliedState:
    """What the shared module currently holds; shared by a patcher and all its clones."""

    backups: dict[str, Tensor] = field(default_factory=dict)
    applied: dict[str, Signature] = field(default_factory=dict)
    # (id(adapter), key, offset) -> (adapter, delta). Holding the adapter keeps its id from being
    # reused by another object while the entry lives.
    deltas: dict[tuple[int, str, Offset | None], tuple[Adapter, Tensor]] = field(default_factory=dict)
    delta_bytes: int = 0
    object_backups: dict[str, object] = field(default_factory=dict)  # attribute path -> original
    objects_applied: dict[str, object] = field(default_factory=dict)  # attribute path -> value set
