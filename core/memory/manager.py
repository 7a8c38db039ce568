"""MemoryManager: the one object that decides where models live, and says why.

Built once by the composition root with an injected ``free_bytes`` probe (a callable) and a
``Mover`` that actually moves modules; tests pass a closure over an int and a fake mover. The
manager keeps the models it has seen in least-recently-used order, holds them only weakly (a model
the app drops disappears, with an "unload" event), asks ``core.memory.planning`` what to do, has
the mover carry it out step by step, and records every decision in its ``EventLog``.

Interrupts: ``interrupt`` is a ``threading.Event`` the UI may set from any thread; ``check()``
raises ``InterruptedByUser`` (and clears the flag). The manager checks between steps; a mover may
check inside a load, in which case the manager rolls that load back so the model stays exactly as
it was. Unloads are never interrupted halfway (``check()`` is silent during them).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import nn

from core.errors import InterruptedByUser, LoadoutError
from core.memory.events import EventLog, MemoryEvent, gib
from core.memory.managed import ManagedModel, looked_up_tables, main_dtype, module_sizes
from core.memory.planning import PlanSettings, Step, plan_free, plan_load_models
from core.memory.transients import inflight_sizes
from core.memory.vram_state import VramState


class NotEnoughMemoryError(LoadoutError):
    """A model could not be placed at all, even streamed (see the "refuse" event's reason)."""

    code = "out_of_memory"


class Mover(Protocol):
    """Moves modules of a managed model and returns the bytes it moved.

    ``load`` puts ``module_names`` on ``device`` (the rest of the model streams at forward time;
    a partial load may come with no names, to set streaming up). ``unload`` moves them back to the
    CPU and must ignore names that are not on the device (the manager uses it to roll back an
    interrupted load). ``stop_streaming`` is called after a full unload: nothing of the model
    streams any more."""

    def load(self, entry: ManagedModel, module_names: Sequence[str], device: str) -> int: ...

    def unload(self, entry: ManagedModel, module_names: Sequence[str]) -> int: ...

    def stop_streaming(self, entry: ManagedModel) -> None: ...


@dataclass(frozen=True)
class LoadedInfo:
    """One row of the UI's model list."""

    name: str
    device_bytes: int
    streamed_bytes: int
    total_bytes: int
    dtype: str | None
    last_used: int


@dataclass(frozen=True)
class LoadResult:
    events: tuple[MemoryEvent, ...]
    refused: tuple[str, ...]  # reasons of the refuse events

    @property
    def ok(self) -> bool:
        return not self.refused

    def raise_if_refused(self) -> None:
        if self.refused:
            raise NotEnoughMemoryError(
                "Not enough GPU memory to run the model",
                why=self.refused[0],
                fix="see the memory panel for what is loaded and why",
            )


def _dropped(manager_ref: weakref.ref[MemoryManager], entry: ManagedModel) -> None:
    manager = manager_ref()
    if manager is not None:
        manager._on_dropped(entry)


class MemoryManager:
    def __init__(
        self,
        free_bytes: Callable[[], int],
        mover: Mover,
        *,
        settings: PlanSettings | None = None,
        device: str = "cuda",
        events: EventLog | None = None,
        interrupt: threading.Event | None = None,
    ) -> None:
        self.free_bytes = free_bytes
        self.mover = mover
        self.settings = settings or PlanSettings()
        self.device = device
        self.events = events if events is not None else EventLog()
        self.interrupt = interrupt if interrupt is not None else threading.Event()
        self._entries: dict[int, ManagedModel] = {}
        self._finalizers: dict[int, weakref.finalize[..., object]] = {}
        self._dead: deque[ManagedModel] = deque()
        self._lock = threading.RLock()  # one decision at a time (held for the whole move)
        self._view = threading.Lock()  # guards ``_entries`` briefly, so the UI never waits on a move
        self._tick = 0
        self._quiet = 0  # > 0 while an unload runs: check() does not raise then
        self._current = ""

    # -- models ------------------------------------------------------------------------------------
    @staticmethod
    def _target(model: object) -> object:
        """The object whose lifetime counts: the module under a patcher (clones share it)."""
        inner = getattr(model, "model", None)
        return inner if not isinstance(model, nn.Module) and isinstance(inner, nn.Module) else model

    def register(
        self,
        model: object,
        name: str | None = None,
        *,
        sizes: Sequence[tuple[str, int]] | None = None,
        dtype: str | None = None,
    ) -> ManagedModel:
        """Track ``model`` (an ``nn.Module``, or an object with a ``.model`` module such as a
        ``ModelPatcher``). Registering it again returns the same entry."""
        with self._lock:
            self._reap()
            target = self._target(model)
            known = self._entries.get(id(target))
            if known is not None and known.model() is target:
                return known
            if sizes is None:
                if not isinstance(target, nn.Module):
                    raise TypeError(
                        f"give the module sizes of {type(model).__name__}: it is not an nn.Module"
                    )
                sizes, dtype = module_sizes(target), dtype or main_dtype(target)
            tables = looked_up_tables(target) if isinstance(target, nn.Module) else frozenset()
            inflight = inflight_sizes(target) if isinstance(target, nn.Module) else ()
            own = getattr(model, "name", None)
            label = name or (own if isinstance(own, str) and own else type(target).__name__)
            taken = {e.name for e in self._entries.values()}
            unique = next(
                n for i in itertools.count(1) if (n := label if i == 1 else f"{label} ({i})") not in taken
            )
            entry = ManagedModel(unique, weakref.ref(target), tuple(sizes), dtype, tables, inflight)
            with self._view:
                self._entries[id(target)] = entry
            self._finalizers[id(target)] = weakref.finalize(target, _dropped, weakref.ref(self), entry)
            return entry

    def _on_dropped(self, entry: ManagedModel) -> None:
        # Runs on whatever thread collected the model: touch only the deque and the event log.
        self._dead.append(entry)
        held = entry.loaded_bytes
        what = (
            f"its {gib(held)} on the device were released with it"
            if held
            else "it held nothing on the device"
        )
        self.events.emit(
            "unload",
            entry.name,
            held,
            f"{entry.name} was dropped by the app; {what}.",
            device_bytes_after=0,
            details={"dropped": True},
        )

    def _reap(self) -> None:
        while self._dead:
            dead = self._dead.popleft()
            for key, entry in list(self._entries.items()):
                if entry is dead:
                    with self._view:
                        del self._entries[key]
                    self._finalizers.pop(key, None)

    def _alive(self) -> list[ManagedModel]:
        with self._view:
            entries = list(self._entries.values())
        return [e for e in entries if e.model() is not None]

    def forget(self, model: object) -> None:
        """Stop tracking ``model`` now (the app is about to drop it; unload it first). Its name is
        free again at once, and no "dropped" event follows when it is collected."""
        with self._lock:
            target = self._target(model)
            entry = self.find(model)
            if entry is None:
                return
            with self._view:
                del self._entries[id(target)]
            finalizer = self._finalizers.pop(id(target), None)
            if finalizer is not None:
                finalizer.detach()

    def find(self, model: object) -> ManagedModel | None:
        """The entry tracking ``model`` (or the module under a patcher), None if not registered."""
        target = self._target(model)
        entry = self._entries.get(id(target))
        return entry if entry is not None and entry.model() is target else None

    def loaded(self) -> list[LoadedInfo]:
        """Models with bytes on the device or set up to stream, most recently used first. Safe to
        call from the UI thread while a load runs: it never waits for one."""
        rows = []
        for e in self._alive():
            on_device, streaming = e.loaded_bytes, e.streaming
            if on_device or streaming:
                streamed = e.total_bytes - on_device if streaming else 0
                rows.append(LoadedInfo(e.name, on_device, streamed, e.total_bytes, e.dtype, e.last_used))
        return sorted(rows, key=lambda r: (-r.last_used, r.name))

    # -- decisions ---------------------------------------------------------------------------------
    def load_models(self, models: Sequence[object], memory_required: int = 0) -> LoadResult:
        """Make room for ``models`` and ``memory_required`` bytes of activations, then place them
        (fully or partly). Refusals come back in the result (``raise_if_refused``), not raised."""
        with self._lock:
            self._reap()
            entries = list({id(e): e for e in (self.register(m) for m in models)}.values())
            self._tick += 1
            for e in entries:
                e.last_used = self._tick
            names = {e.name for e in entries}
            steps = self._plan(entries, memory_required)
            frees = [s for s in steps if s.model not in names]
            done: list[MemoryEvent] = []
            if frees:  # evict, then plan again on what the probe says: an allocator may free less
                done = self._run(frees)
                steps = self._plan(entries, memory_required)
            done += self._run(steps)
            return LoadResult(tuple(done), tuple(ev.reason for ev in done if ev.kind == "refuse"))

    def _plan(self, entries: list[ManagedModel], memory_required: int) -> list[Step]:
        names = {e.name for e in entries}
        others = [e.state() for e in self._alive() if e.name not in names]
        wanted = [e.state(pinned=True) for e in entries]
        return plan_load_models(wanted, others, self.free_bytes(), memory_required, self.settings)

    def free_memory(self, bytes_free: int, keep: Iterable[object] = ()) -> LoadResult:
        """Move models off the device until ``bytes_free`` bytes are free, never touching ``keep``
        (models or names). What cannot be freed is reported as a "refuse" event."""
        with self._lock:
            self._reap()
            kept = {k if isinstance(k, str) else self.register(k).name for k in keep}
            states = [e.state(pinned=e.name in kept) for e in self._alive()]
            need = bytes_free - self.free_bytes()
            plan = plan_free(
                states,
                need,
                kept,
                making_room_for=f"{gib(bytes_free)} of free device memory",
                allow_partial=self.settings.vram_state != VramState.HIGH_VRAM,
            )
            done = self._run(list(plan.steps))
            if not plan.possible:
                done.append(
                    self.events.emit(
                        "refuse",
                        "",
                        0,
                        plan.shortfall_reason(kept, f" to leave {gib(bytes_free)} free"),
                        details={"shortfall_bytes": plan.shortfall_bytes},
                    )
                )
            return LoadResult(tuple(done), tuple(ev.reason for ev in done if ev.kind == "refuse"))

    def unload_all(self, why: str = "every model was unloaded on request") -> LoadResult:
        """Every model back to the CPU (streaming set-ups included)."""
        return self._unload_where(lambda e: True, why)

    def unload_models(self, models: Sequence[object], why: str = "you offloaded it") -> LoadResult:
        """``models`` back to the CPU, whole (streaming set-ups included); ``why`` ends the reason."""
        with self._lock:
            wanted = {id(self._target(m)) for m in models}
            return self._unload_where(lambda e: id(e.model()) in wanted, why)

    def _unload_where(self, which: Callable[[ManagedModel], bool], why: str) -> LoadResult:
        with self._lock, self._uninterrupted():  # unloads are never stopped halfway
            self._reap()
            steps = [
                Step(
                    "unload",
                    e.name,
                    e.loaded_bytes,
                    tuple(sorted(e.loaded_modules)),
                    0,
                    f"Unloaded {e.name} ({gib(e.loaded_bytes)}) to system RAM: {why}.",
                )
                for e in sorted(self._alive(), key=lambda e: e.last_used)
                if (e.loaded_modules or e.streaming) and which(e)
            ]
            done = self._run(steps)
            return LoadResult(tuple(done), ())

    # -- carrying steps out ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _uninterrupted(self) -> Iterator[None]:
        self._quiet += 1
        try:
            yield
        finally:
            self._quiet -= 1

    def _run(self, steps: Sequence[Step]) -> list[MemoryEvent]:
        by_name = {e.name: e for e in self._alive()}
        done: list[MemoryEvent] = []
        for step in steps:
            self.check()
            entry = by_name.get(step.model)
            if entry is None or entry.model() is None:
                continue  # dropped meanwhile: its finalizer already told the story
            if self._already_placed(entry, step):
                continue  # placed exactly so by an earlier call: nothing to move, nothing to tell
            if step.kind == "keep" and entry.last_reason == step.reason:
                continue  # the same "nothing moved" as last time: say it once
            self._current = step.model
            try:
                moved = self._carry_out(entry, step)
            finally:
                self._current = ""
            event = step.to_event(
                self.events.clock(),
                moved=moved,
                device_bytes_after=entry.loaded_bytes,
                free_bytes_after=self.free_bytes(),
            )
            entry.last_reason = step.reason
            self.events.append(event)
            done.append(event)
        return done

    @staticmethod
    def _already_placed(entry: ManagedModel, step: Step) -> bool:
        if step.kind not in ("load", "partial_load"):
            return False
        same_mode = entry.streaming == (step.kind == "partial_load")
        placed_before = bool(entry.loaded_modules) or entry.streaming
        return placed_before and same_mode and set(step.modules) <= entry.loaded_modules

    def _carry_out(self, entry: ManagedModel, step: Step) -> int:
        if step.kind in ("unload", "partial_unload"):
            with self._uninterrupted():
                moved = self.mover.unload(entry, step.modules)
                entry.loaded_modules = entry.loaded_modules - set(step.modules)
                if step.kind == "unload":
                    self.mover.stop_streaming(entry)
                else:  # what left the device streams from now on, patched at cast time
                    self.mover.load(entry, (), self.device)
            entry.streaming = step.kind == "partial_unload"
            return moved
        if step.kind in ("load", "partial_load"):
            try:
                moved = self.mover.load(entry, step.modules, self.device)
            except BaseException:
                with self._uninterrupted():  # roll back: the model stays as it was before this step
                    self.mover.unload(entry, [n for n in step.modules if n not in entry.loaded_modules])
                    if entry.loaded_modules or entry.streaming:
                        self.mover.load(entry, (), self.device)  # streaming as it was
                    else:
                        self.mover.stop_streaming(entry)
                raise
            entry.loaded_modules = entry.loaded_modules | set(step.modules)
            entry.streaming = step.kind == "partial_load"
            return moved
        return 0

    # -- interrupt ---------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise ``InterruptedByUser`` if the user asked to stop (and clear the request)."""
        if self._quiet or not self.interrupt.is_set():
            return
        self.interrupt.clear()
        where = f" while moving {self._current}" if self._current else ""
        self.events.emit(
            "interrupt",
            self._current,
            0,
            f"Stopped by the user{where}; every model was left as it was before the interrupted move.",
        )
        raise InterruptedByUser(
            f"Stopped by the user{where}",
            why="a stop was asked for",
            fix="start the run again when ready",
        )
