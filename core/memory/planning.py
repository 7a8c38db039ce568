"""Memory planning as pure functions on numbers: what to evict, what to place, what to stream.

Nothing here touches a tensor or a device. The manager (``core.memory.manager``) turns the live
models into ``ModelState`` records, asks these functions for ``Step``s and carries them out; each
step already holds the human reason its event will show.

Decision rules (see ``docs`` of each function for the why):

* **Room.** The inference reserve is ``max(memory_required + reserve_bytes, min_inference_bytes)``:
  ``memory_required`` is the workload's predicted activation peak (``core.memory.inference``),
  ``reserve_bytes`` what other programs keep, ``min_inference_bytes`` a floor (the user's).
  A model's room is ``free + its own resident bytes - reserve``. Weights being placed are charged
  ``headroom`` times their size (1.1, as ComfyUI; 1.3 in low-VRAM mode, where fragmentation and
  cast buffers weigh more on a small card); modules already resident are kept at their real size,
  so a model is never moved out for the margin alone and planning it again moves nothing.
* **Eviction order.** Partly offloaded models first, then least recently used, then smallest;
  never a model the caller is about to use. Each victim gives up only what is still missing:
  a partial unload when that is enough, the whole model otherwise.
* **Placement.** A model that fits is loaded fully. Otherwise modules are placed smallest first
  while they fit, so the many small ones stay and the few large ones stream (a streamed module
  costs a fixed ~150 us of issuing per forward besides its bytes: on an H200, SDXL's UNet at 25 %
  resident ran 1.9x the resident step largest-first and 1.17x smallest-first, docs/benchmarks.md;
  ComfyUI places largest first); the rest stream from the CPU at each forward, which needs room for
  ``stream_buffers`` of the largest streamed modules in flight on top of the inference reserve.
  A model is refused only when even that (activations + reserve + the modules in flight, nothing
  resident) exceeds the room; the refusal's details carry those numbers so that the caller can
  name a size or batch that fits.
* **States.** disabled: all on the CPU, nothing moves. shared (unified memory): always a full load,
  never an eviction (moving to "CPU" frees nothing). no_vram: everything streams. high_vram: never
  a partial load nor a partial unload; a model that cannot fit fully is refused.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from core.memory.events import Detail, EventKind, Shortfall, gib
from core.memory.eviction import choose_modules_to_free, plan_free
from core.memory.plan_records import (
    VRAM_STATES,
    WHOLE,
    FreePlan,
    LoadPlan,
    ModelState,
    PlanSettings,
    Step,
)
from core.memory.vram_state import VramState

__all__ = [
    "VRAM_STATES",
    "WHOLE",
    "FreePlan",
    "LoadPlan",
    "ModelState",
    "PlanSettings",
    "Step",
    "choose_modules_to_free",
    "plan_free",
    "plan_load",
    "plan_load_models",
]


def _largest_first(mods: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    return sorted(mods, key=lambda m: (-m[1], m[0]))


def _buffer(streamed: Iterable[int], k: int) -> int:
    return sum(sorted(streamed, reverse=True)[:k])


def _charge(nbytes: int, headroom: float) -> int:
    return round(nbytes * headroom)


class _Streamed:
    """Sizes of the modules left to stream, largest first: the in-flight buffer is the top ``k``."""

    def __init__(self, sizes: Iterable[int], k: int) -> None:
        self.neg, self.k = sorted(-s for s in sizes), k

    def buffer(self) -> int:
        return -sum(self.neg[: self.k])

    def buffer_without(self, size: int) -> int:
        if bisect.bisect_left(self.neg, -size) >= self.k:
            return self.buffer()
        return -sum(self.neg[: self.k + 1]) - size

    def add(self, size: int) -> None:
        bisect.insort(self.neg, -size)

    def remove(self, size: int) -> None:
        del self.neg[bisect.bisect_left(self.neg, -size)]


def _placement(m: ModelState, room: int, h: float, k: int) -> set[str]:
    """Modules to have on the device: what is resident stays at its real size unless it and the
    in-flight buffers exceed ``room`` (then the fewest, largest leave); new modules are added
    smallest first while ``placed * h + buffers <= room``. A second plan thus adds nothing."""
    mods, fly = m.modules, m.flight
    placed = {n for n, _ in mods if n in m.resident}
    used = sum(s for n, s in mods if n in placed)
    streamed = _Streamed((fly[n] for n, _ in mods if n not in placed), k)
    while placed and used + streamed.buffer() > room:
        over = used + streamed.buffer() - room
        for n, s in choose_modules_to_free([(n, s) for n, s in mods if n in placed], over):
            placed.discard(n)
            used -= s
            streamed.add(fly[n])
    for n, s in sorted(mods, key=lambda m: (m[1], m[0])):
        if n not in placed and _charge(used + s, h) + streamed.buffer_without(fly[n]) <= room:
            placed.add(n)
            used += s
            streamed.remove(fly[n])
    return placed


def _decide(
    model: ModelState, cfg: PlanSettings, free_bytes: int, reserve: int
) -> tuple[set[str] | None, str]:
    """The modules to have on the device (None: refuse) and the clause or sentence saying why."""
    state, h, k = cfg.vram_state, cfg.weight_headroom, cfg.stream_buffers
    name, total, mods = model.name, model.total_bytes, model.modules
    everything = {n for n, _ in mods}
    room = free_bytes + model.loaded_bytes - reserve  # the same before and after our own moves
    free_for_it = free_bytes + model.loaded_bytes
    context = f"the {gib(free_for_it)} free once {gib(reserve)} is kept for inference"
    if state == VramState.LOW_VRAM:
        context += f" (low-VRAM mode counts weights at {h:g}x their size)"
    if state == VramState.DISABLED:
        return set(), f"{name} stays on the CPU ({gib(total)}): the GPU is disabled, so nothing moves."
    if state == VramState.SHARED:
        return everything, f"the GPU shares system memory, so offloading {name} would gain nothing"
    if state != VramState.NO_VRAM and (_charge(total, h) <= room or model.loaded_bytes == total <= room):
        return everything, f"it fits in {context}"
    if state == VramState.HIGH_VRAM:
        return None, (
            f"Cannot load {name} ({gib(total)}): high-VRAM mode never streams weights, and it does "
            f"not fit in {context}. Switch to normal VRAM mode or unload other models."
        )
    target = set() if state == VramState.NO_VRAM else _placement(model, room, h, k)
    placed = sum(s for n, s in mods if n in target)
    fly = model.flight
    if placed + _buffer((fly[n] for n, _ in mods if n not in target), k) > room:
        least = _buffer(fly.values(), k)
        kept = min(cfg.reserve_bytes, reserve)
        parts = (
            f"{gib(reserve - kept)} for activations, {gib(least)} for up to {k} streamed modules in flight"
        )
        if kept:
            parts += f", {gib(kept)} kept for other programs"
        return None, (
            f"Cannot run {name}: even streaming all its weights needs {gib(reserve + least)} on the "
            f"device ({parts}), but only {gib(free_for_it)} is free."
        )
    if state == VramState.NO_VRAM:
        return target, "no-VRAM mode keeps weights off the device"
    return target, f"all {gib(total)} do not fit in {context}"


def plan_load(
    model: ModelState, free_bytes: int, inference_bytes: int, settings: PlanSettings | None = None
) -> LoadPlan:
    """Where ``model``'s modules go given ``free_bytes`` on the device now (after any eviction) and
    ``inference_bytes`` wanted for activations. Never raises: an impossible load is a refuse plan.

    Modules already resident stay unless the budget shrank (then the fewest, largest ones leave),
    so planning the same model twice moves nothing."""
    cfg = settings or PlanSettings()
    reserve = cfg.inference_reserve(inference_bytes)
    target, note = _decide(model, cfg, free_bytes, reserve)
    numbers: dict[str, Detail] = {
        "total_bytes": model.total_bytes,
        "free_bytes": free_bytes,
        "reserve_bytes": reserve,
        "vram_state": cfg.vram_state,
        "headroom": cfg.weight_headroom,
    }
    if target is None:
        return _refuse_plan(model, cfg, free_bytes, reserve, note, numbers)
    name, total, resident = model.name, model.total_bytes, model.resident
    ordered = _largest_first(model.modules)
    size = dict(ordered)
    to_load = tuple(n for n, _ in ordered if n in target and n not in resident)
    to_unload = tuple(n for n, _ in ordered if n in resident and n not in target)
    device, on_cpu = sum(size[n] for n in target), cfg.vram_state == VramState.DISABLED
    streamed = 0 if on_cpu else total - device
    fly = model.flight
    buffer = 0 if on_cpu else _buffer((fly[n] for n, _ in ordered if n not in target), cfg.stream_buffers)
    numbers |= {"device_bytes": device, "streamed_bytes": streamed, "buffer_bytes": buffer}
    steps: list[Step] = []
    if to_unload:
        out = sum(size[n] for n in to_unload)
        why = (
            f"Moved {gib(out)} of {name} back to the CPU: with {gib(reserve)} kept for inference, "
            f"{gib(device)} of it fits on the device now."
        )
        kind: EventKind = "partial_unload" if target else "unload"
        steps.append(Step(kind, name, out, to_unload, model.loaded_bytes - out, why, numbers))
    moved_in = sum(size[n] for n in to_load)
    kind, reason = (
        ("keep", note)
        if on_cpu
        else _load_words(model, note, device=device, streamed=streamed, moved_in=moved_in, placed=len(target))
    )
    steps.append(Step(kind, name, moved_in, to_load, device, reason, numbers))
    on_device = tuple(n for n, _ in ordered if n in target)
    return LoadPlan(
        name, kind, on_device, to_load, to_unload, device, streamed, reserve, buffer, reason, tuple(steps)
    )


def _refuse_plan(
    model: ModelState, cfg: PlanSettings, free_bytes: int, reserve: int, note: str, numbers: dict[str, Detail]
) -> LoadPlan:
    """The refuse plan, with the numbers a caller needs to say what would fit."""
    kept = min(cfg.reserve_bytes, reserve)
    short = Shortfall(
        room_bytes=free_bytes + model.loaded_bytes,
        stream_buffer_bytes=_buffer(model.flight.values(), cfg.stream_buffers),
        kept_bytes=kept,
        activation_bytes=reserve - kept,
    )
    keep = tuple(n for n, _ in _largest_first(model.modules) if n in model.resident)
    name, loaded = model.name, model.loaded_bytes
    step = Step("refuse", name, 0, (), loaded, note, numbers | short.details(), short)
    return LoadPlan(name, "refuse", keep, (), (), loaded, 0, reserve, 0, note, (step,))


def _load_words(
    model: ModelState, note: str, *, device: int, streamed: int, moved_in: int, placed: int
) -> tuple[EventKind, str]:
    """The kind and the sentence of a load step: ``device`` bytes (``placed`` modules) on the
    device, ``streamed`` left on the CPU, ``moved_in`` by this load."""
    name, total = model.name, model.total_bytes
    if streamed:
        where = (
            f"Loaded {gib(device)} of {name} ({placed} of {len(model.modules)} modules) and left "
            f"{gib(streamed)}"
            if device
            else f"Left all of {name} ({gib(total)})"
        )
        return "partial_load", f"{where} on the CPU to stream at each step: {note}."
    if moved_in:
        what = (
            f"{name} fully ({gib(total)})"
            if moved_in == total
            else f"the remaining {gib(moved_in)} of {name} ({gib(total)} in all)"
        )
        return "load", f"Loaded {what}: {note}."
    return "keep", f"{name} is already fully on the device ({gib(total)}); nothing moved."


def _room_phrase(models: Sequence[ModelState]) -> str:
    named = [f"{m.name} ({gib(m.total_bytes)})" for m in models]
    if len(named) <= 2:
        return " and ".join(named)
    rest = sum(m.total_bytes for m in models[1:])
    return f"{named[0]} and {len(named) - 1} more models ({gib(rest)})"


def plan_load_models(
    models_to_load: Sequence[ModelState],
    loaded_models: Iterable[ModelState],
    free_bytes: int,
    memory_required: int,
    settings: PlanSettings | None = None,
) -> list[Step]:
    """The whole decision for one ``load_models`` call: evictions, then each model's placement in
    the caller's order (earlier models get the room first).

    The room asked for is ``sum(bytes still to load) * headroom + inference reserve`` (only the
    reserve in no-VRAM mode); when it cannot all be found, every other model is evicted (partial
    loads then get as much as possible), unless every requested model would be refused anyway,
    in which case nothing is evicted for nothing. Shared and disabled states never evict."""
    cfg = settings or PlanSettings()
    state = cfg.vram_state
    wanted: dict[str, ModelState] = {}
    for m in models_to_load:
        wanted.setdefault(m.name, m)
    todo = list(wanted.values())
    others = [m for m in loaded_models if m.name not in wanted]
    freeing = FreePlan((), 0, 0)
    if state not in (VramState.DISABLED, VramState.SHARED):
        if state == VramState.NO_VRAM:
            weights = _buffer((s for m in todo for s in m.flight.values()), cfg.stream_buffers) - sum(
                m.loaded_bytes for m in todo
            )
        else:
            h = cfg.weight_headroom
            weights = sum(
                _charge(m.total_bytes, h) - m.loaded_bytes for m in todo if m.loaded_bytes < m.total_bytes
            )
        need = weights + cfg.inference_reserve(memory_required) - free_bytes
        if need > 0:
            partial = state != VramState.HIGH_VRAM
            room_for = _room_phrase(todo)
            freeing = plan_free(others, need, wanted, making_room_for=room_for, allow_partial=partial)
    loads, refused = _place_all(todo, free_bytes + freeing.bytes_freed, memory_required, cfg)
    if freeing.steps and todo and refused == len(todo):  # all refused anyway: evict nothing for nothing
        return _place_all(todo, free_bytes, memory_required, cfg)[0]
    return [*freeing.steps, *loads]


def _least(m: ModelState, cfg: PlanSettings) -> int:
    """Device bytes ``m`` still needs to run at all: its in-flight buffers when it streams whole."""
    return max(0, _buffer(m.flight.values(), cfg.stream_buffers) - m.loaded_bytes)


def _place_all(
    todo: Sequence[ModelState], free: int, memory_required: int, cfg: PlanSettings
) -> tuple[list[Step], int]:
    """Each model's steps in turn, each seeing what the earlier ones left; and how many were refused.

    When that refuses a model, the call is planned again with the models' in-flight buffers in one
    shared region: they run one at a time, so the largest of their least needs (:func:`_least`) is
    kept free of every model's placed weights, not only the model's own (SD3's three text encoders
    on a small card: CLIP-L placed in part left CLIP-G too little to stream at all)."""
    steps, refused = _place_each(todo, free, memory_required, cfg, [0] * len(todo))
    if refused and len(todo) > 1:
        least = [_least(m, cfg) for m in todo]
        shared = max(least)
        again, still = _place_each(todo, free, memory_required, cfg, [shared - n for n in least])
        if still < refused:
            return again, still
    return steps, refused


def _place_each(
    todo: Sequence[ModelState], free: int, memory_required: int, cfg: PlanSettings, held: Sequence[int]
) -> tuple[list[Step], int]:
    steps: list[Step] = []
    refused = 0
    for m, keep in zip(todo, held, strict=True):
        plan = plan_load(m, free - keep, memory_required, cfg)
        steps += plan.steps
        refused += plan.kind == "refuse"
        free -= plan.device_bytes - m.loaded_bytes
    return steps, refused
