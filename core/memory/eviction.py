"""Eviction: which resident models, and which of their modules, leave the device to free a number
of bytes (:func:`plan_free`), and the best-fit choice of modules within one model
(:func:`choose_modules_to_free`). Pure functions on numbers; :mod:`core.memory.planning` uses them
before placing models."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from core.memory.events import Detail, gib
from core.memory.plan_records import FreePlan, ModelState, Step

__all__ = ["choose_modules_to_free", "plan_free"]


def choose_modules_to_free(resident: Sequence[tuple[str, int]], need: int) -> list[tuple[str, int]]:
    """Modules to move off the device to free at least ``need`` bytes.

    Largest first, with a best fit at the end: while no single module covers what is missing the
    largest goes (few transfers, few streamed layers, and the big ones are the cheapest per byte to
    stream); once one does, the smallest such module goes, so little more than asked is freed."""
    pool = sorted(resident, key=lambda m: (m[1], m[0]))
    sizes = [s for _, s in pool]
    chosen: list[tuple[str, int]] = []
    while need > 0 and pool:
        i = bisect.bisect_left(sizes, need)
        i = i if i < len(pool) else len(pool) - 1
        sizes.pop(i)
        chosen.append(pool.pop(i))
        need -= chosen[-1][1]
    return chosen


def _eviction_key(m: ModelState) -> tuple[bool, int, int, str]:
    return (not m.partially_loaded, m.last_used, m.loaded_bytes, m.name)


def _why_evicted(m: ModelState, rest: Sequence[ModelState], first: bool) -> str:
    if m.partially_loaded:
        return "it was already partly offloaded, so it goes first"
    if not rest:
        return (
            "it was the only model that could be moved"
            if first
            else "it was the last model that could be moved"
        )
    if all(m.last_used < r.last_used for r in rest):
        return "it was the least recently used" if first else "it was the least recently used of those left"
    return "it was among the least recently used, and the smallest of those"


def plan_free(
    models: Iterable[ModelState],
    bytes_needed: int,
    keep: Iterable[str] = (),
    *,
    making_room_for: str = "",
    allow_partial: bool = True,
) -> FreePlan:
    """Steps that move at least ``bytes_needed`` off the device, never touching ``keep`` or a model
    pinned by the caller. When that is impossible the plan frees everything it can, and
    ``possible``/``shortfall_bytes`` say so."""
    kept = set(keep)
    order = sorted(
        (m for m in models if m.loaded_bytes > 0 and not m.pinned_by_caller and m.name not in kept),
        key=_eviction_key,
    )
    purpose = f" to make room for {making_room_for}" if making_room_for else ""
    steps: list[Step] = []
    remaining = bytes_needed
    for i, m in enumerate(order):
        if remaining <= 0:
            break
        resident = [(n, s) for n, s in m.modules if n in m.resident]
        partial = allow_partial and remaining < m.loaded_bytes and len(resident) > 1
        chosen = choose_modules_to_free(resident, remaining) if partial else resident
        freed = sum(s for _, s in chosen)
        why = _why_evicted(m, order[i + 1 :], first=i == 0)
        details: dict[str, Detail] = {"needed_bytes": remaining, "last_used": m.last_used}
        if freed < m.loaded_bytes:
            left = m.loaded_bytes - freed
            reason = (
                f"Moved {gib(freed)} of {m.name} ({len(chosen)} of {len(resident)} modules on the device) "
                f"back to the CPU{purpose}; {why}. {gib(left)} of it stays on the device."
            )
            steps.append(
                Step("partial_unload", m.name, freed, tuple(n for n, _ in chosen), left, reason, details)
            )
        else:
            reason = f"Evicted {m.name} ({gib(freed)}){purpose}; {why}."
            steps.append(Step("unload", m.name, freed, tuple(n for n, _ in chosen), 0, reason, details))
        remaining -= freed
    return FreePlan(tuple(steps), max(0, bytes_needed), sum(s.bytes for s in steps))
