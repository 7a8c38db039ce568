"""The session: which models are loaded, in which slots, where they compute, and their LoRA stack.

One object, owned by one thread at a time, that the window (through its backend worker),
``loadout run`` and the generate pipeline all use. Every call returns a frozen snapshot
(:mod:`core.session.snapshots`). Long calls take ``progress`` and ``check`` callables and pass
them down to core, which raises ``InterruptedByUser`` when the check says stop. A stopped load
changes nothing: the new model is only swapped in once complete.

The session owns the interrupt flag (``interrupt``): the placement's manager and mover check it
between layers, and a front end sets it from any thread. Placement is a :class:`Placement` built
complete by :mod:`core.session.placement`; new memory settings build a new one.

A generation pipeline adds a method next to :meth:`Session.test_run`: it finds the main model's
diffusion network, its text encoders (or those of a text-encoder slot) and a VAE (the main
model's or a VAE slot's) with :meth:`Session.component`, and places each phase's models through
the same ``placement.place`` before running it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from torch import nn

from core.archs.catalog import reference_limit
from core.detect.catalog import generation_defaults, latent_format_for
from core.detect.lora_flux_control import takes_control_picture
from core.detect.types import Detection
from core.errors import LoadoutError
from core.files.dtypes import short_name, torch_dtype_by_short
from core.files.model_file import TensorIndex
from core.loading.assign import LoadProgress
from core.loading.loader import LoadedComponent, LoadOptions, inspect_for_loading
from core.memory.dtypes import DtypeChoice
from core.memory.events import MemoryEvent
from core.memory.manager import NotEnoughMemoryError
from core.ops.fp8 import is_fp8
from core.patching.lora_stack import LoraStack, component_name
from core.sampling.network import NetworkAdapter
from core.session.dtype_choice import asks_for_compute, diffusion_choice
from core.session.library import Library
from core.session.loras import LoraControl
from core.session.measure import measured_test_run
from core.session.placement import Placement, PlacementConfig, PlacementInfo
from core.session.slots import LoadedModel, Loaders, SlotId, refuse_unloadable
from core.session.snapshots import ComponentInfo, ModelInfo, RunReport, SessionEvent
from core.session.testrun import RunConfig, StepDone
from core.session.words import MEMORY_WORDS, kind_word, no_model, not_loaded
from core.units import in_mib

Check = Callable[[], None]


def _dtype_name(module: nn.Module) -> str:
    for p in module.parameters():
        if p.is_floating_point():
            return short_name(p.dtype)
    return "-"


def _device_name(module: nn.Module) -> str:
    p = next(module.parameters(), None)
    return str(p.device) if p is not None else "cpu"


def file_naming(loaded: LoadedModel, comp: LoadedComponent) -> str:
    """A component by its file: "juggernaut-xl diffusion model" (the window's event list)."""
    return f"{loaded.path.stem} {kind_word(comp.role, comp.family)}"


def family_naming(loaded: LoadedModel, comp: LoadedComponent) -> str:
    """A component by its model family: "sdxl diffusion model" (``loadout run``'s report)."""
    return f"{loaded.family or 'model'} {kind_word(comp.role, comp.family)}"


class Session:
    def __init__(
        self,
        placement: Placement | None = None,
        *,
        library: Library | None = None,
        loaders: Loaders | None = None,
        on_event: Callable[[SessionEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        naming: Callable[[LoadedModel, LoadedComponent], str] | None = None,
    ) -> None:
        self.placement = placement if placement is not None else Placement(None)
        self.library = library if library is not None else Library()
        self.loaders = loaders or Loaders()
        self.on_event = on_event or (lambda event: None)
        self.clock = clock
        self.naming = naming or file_naming  # what the manager (and its events) call a component
        self.loaded: dict[SlotId, LoadedModel] = {}
        self.loras = LoraControl(lambda: self.placement, self._event)
        self.dtype_overrides: Mapping[str, str] = {}  # role -> short dtype name, applied at load
        self._generations = itertools.count(1)
        self.placement.events.subscribe(self._memory_event)  # shared by every later placement

    def next_generation(self) -> int:
        """A number no earlier load of this session had (what derived-result caches are keyed by)."""
        return next(self._generations)

    @property
    def interrupt(self) -> threading.Event:
        """Set it from any thread to stop the running call (checked between tensors, layers, steps)."""
        return self.placement.interrupt

    # -- events -----------------------------------------------------------------------------------
    def _event(self, kind: str, label: str, reason: str) -> None:
        self.on_event(SessionEvent(self.clock(), kind, label, reason))

    def note(self, kind: str, label: str, reason: str) -> None:
        """Tell the front end something an operation built on the session did (a generation's
        phase: ``kind`` "phase" with the phase's name, "phase_end" when it is over)."""
        self._event(kind, label, reason)

    def _memory_event(self, event: MemoryEvent) -> None:
        """A memory-manager decision, relayed as it happens (on whatever thread made it)."""
        words = MEMORY_WORDS.get(event.kind, event.kind)
        label = f"{words} {event.model}".strip()
        self.on_event(SessionEvent(event.timestamp, event.kind, label, event.reason))

    # -- loading ----------------------------------------------------------------------------------
    def load(
        self,
        path: Path,
        kind: str,
        progress: Callable[[LoadProgress], None],
        check: Check,
        *,
        inspected: tuple[TensorIndex, Detection] | None = None,
    ) -> ModelInfo:
        """Load ``path`` as ``kind`` into its slot (replacing what was there once it is complete).

        The file's header is read once; its detection is the library scan's when the file is
        unchanged since (or ``inspected``, an index and detection the caller just made)."""
        load_kind = refuse_unloadable(path, kind)
        t0 = time.perf_counter()
        index, detection = inspected if inspected is not None else (None, self.library.detection(path))
        index, detection, choice = self._dtype_choice(path, load_kind, index, detection)
        fp8 = choice is not None and is_fp8(choice.compute)
        options = LoadOptions(
            progress=progress, check=check, index=index, detection=detection, fp8_matmul=fp8
        )
        components = self.loaders.load(load_kind, path, options)
        check()  # a stop pressed after the last tensor still leaves the old state in place
        if choice is not None:  # the user asked for a compute dtype: the decision and its reason
            self.placement.events.emit("dtype", f"{path.stem} diffusion model", 0, choice.reason)
        self._apply_dtype_overrides(components)
        seconds = time.perf_counter() - t0
        slot = SlotId.for_load(load_kind, components[0].family)
        previous = self.loaded.get(slot)
        if previous is not None:
            self._release(previous)
        loaded = LoadedModel(
            slot, path, load_kind, components, seconds, dtype_choice=choice, generation=self.next_generation()
        )
        self.loaded[slot] = loaded
        stack = None
        if slot == SlotId.MAIN:
            stack = self.loras.stack = LoraStack([c for c in components if c.role != "vae"])
        loaded.managed = [
            stack.patchers[component_name(c)] if stack is not None and c.role != "vae" else c.module
            for c in components
        ]
        if self.placement.active:
            self._register(loaded)
        if previous is not None:
            self._event("unload", f"unload {previous.path.name}", f"replaced by {path.name}")
            del previous  # freed by reference counting (no gc.collect: a full collection holds the
            # GIL for 100+ ms and would stall the GUI thread)
        info = self._info(loaded)
        self._event(
            "load",
            f"load {path.name}",
            f"{len(components)} component(s), {in_mib(info.bytes, 1)} in {seconds:.2f} s; {self._where()}",
        )
        return info

    def _where(self) -> str:
        """Where a loaded model is until it runs (the load event's last clause)."""
        if self.placement.active:
            return (
                f"in system RAM, memory-mapped from the file; it is placed on "
                f"{self.placement.describe().label} when asked or when it runs"
            )
        return "in system RAM, memory-mapped from the file; computed on the CPU (no GPU)"

    def _dtype_choice(
        self, path: Path, kind: str, index: TensorIndex | None, detection: Detection | None
    ) -> tuple[TensorIndex | None, Detection | None, DtypeChoice | None]:
        """The diffusion model's dtype decision where the settings choose its compute dtype (fp8
        matmul), else None; the file is inspected here when not yet, once (the loader reuses it)."""
        if kind not in ("checkpoint", "diffusion_model") or not asks_for_compute(
            self.placement.config.settings
        ):
            return index, detection, None
        if detection is None:
            index, detection = inspect_for_loading(path)
        return index, detection, diffusion_choice(self.placement, detection)

    def _register(self, loaded: LoadedModel) -> None:
        for comp, obj in loaded.pairs():
            self.placement.register(obj, self.naming(loaded, comp), comp.family)

    def _release(self, loaded: LoadedModel) -> None:
        for obj in loaded.managed:  # also without a device: a card switched off left them tracked
            self.placement.release(obj)

    def _apply_dtype_overrides(self, components: list[LoadedComponent]) -> None:
        for comp in components:
            name = self.dtype_overrides.get(comp.role, "")
            dtype = torch_dtype_by_short(name) if name in ("fp32", "fp16", "bf16") else None
            if dtype is not None and _dtype_name(comp.module) != name:
                comp.module.to(dtype)

    def unload(self, slot: SlotId, reason: str = "you unloaded it; its memory is released") -> None:
        loaded = self.loaded.get(slot)
        if loaded is None:
            return
        self._release(loaded)  # first: if it fails, the model is still listed and can be retried
        del self.loaded[slot]
        if slot == SlotId.MAIN:
            self.loras.stack = None
        name = loaded.path.name
        del loaded
        self._event("unload", f"unload {name}", reason)

    def model(self, slot: SlotId) -> LoadedModel:
        loaded = self.loaded.get(slot)
        if loaded is None:
            raise not_loaded()
        return loaded

    def component(self, role: str, slot: SlotId = SlotId.MAIN) -> tuple[LoadedComponent, object]:
        """The first component with ``role`` of the model in ``slot``, and what the manager tracks
        for it (its patcher, or its module)."""
        loaded = self.loaded.get(slot)
        found = loaded.pairs(role) if loaded is not None else []
        if not found:
            raise no_model()
        return found[0]

    # -- placement (the memory manager) -----------------------------------------------------------
    def _need_device(self) -> None:
        if not self.placement.active:
            info = self.placement.describe()
            raise LoadoutError(
                "there is no GPU to place models on",
                why=info.reason,
                fix="Models compute on the CPU from RAM. To see the memory manager at work without a GPU, "
                "use a simulated card (a size to simulate)",
                code="no_device",
            )

    def place(self, slot: SlotId, role: str | None = None) -> tuple[ModelInfo, ...]:
        """Load a model's components (or the one with ``role``) to the GPU: fully, or partly with
        the rest streaming. The memory manager decides, evicting others if needed, and says why."""
        self._need_device()
        loaded = self.model(slot)
        result = self.placement.place([obj for _, obj in loaded.pairs(role)])
        if result.refused:
            done = [kind_word(c.role, c.family) for c, obj in loaded.pairs() if self.placement.is_placed(obj)]
            placed = f" ({', '.join(done)} placed)" if done else ""
            raise NotEnoughMemoryError(
                f"not enough GPU memory for all of {loaded.path.name}{placed}",
                why=result.refused[0],
                fix="Offload other models, lower the memory kept free for other programs, or place the "
                "components one by one",
            )
        return self.models()

    def offload(self, slot: SlotId, role: str | None = None) -> tuple[ModelInfo, ...]:
        """Move a model's components (or one) back to system RAM (their memory-mapped tensors)."""
        self._need_device()
        self.placement.offload([obj for _, obj in self.model(slot).pairs(role)])
        return self.models()

    def configure(self, config: PlacementConfig) -> PlacementInfo:
        """New memory settings: everything returns to RAM, then a new placement takes over."""
        old = self.placement
        self.placement = old.reconfigured(config)
        for loaded in self.loaded.values():
            self._release_from(old, loaded)
        self.loras.moved(old.active, self.placement.active)
        if self.placement.active:
            for loaded in self.loaded.values():
                self._register(loaded)
        info = self.placement.describe()
        self._event("settings", f"memory: {info.label}", info.reason)
        return info

    @staticmethod
    def _release_from(placement: Placement, loaded: LoadedModel) -> None:
        for obj in loaded.managed:
            placement.release(obj)

    # -- snapshots --------------------------------------------------------------------------------
    def models(self) -> tuple[ModelInfo, ...]:
        return tuple(self._info(m) for m in self.loaded.values())

    def _info(self, loaded: LoadedModel) -> ModelInfo:
        patched = self.loras.patched_keys() if loaded.slot == SlotId.MAIN else {}
        placement, comps = self.placement, []
        for c, obj in loaded.pairs():
            on_device, streamed = placement.placement_of(obj) if placement.active else (0, 0)
            placed = placement.is_placed(obj) if placement.active else False
            device = (placement.target or "cpu") if placed else _device_name(c.module)
            info = ComponentInfo(
                c.role, c.family, _dtype_name(c.module), c.nbytes, device,
                0 if c.role == "vae" else patched.get(component_name(c), 0),
                placed, on_device, streamed,
            )  # fmt: skip
            comps.append(info)
        return ModelInfo(
            loaded.slot.key, loaded.path, loaded.kind, loaded.family, tuple(comps), loaded.seconds,
            generation_defaults(loaded.family), reference_limit(loaded.family),
            _reads_control_picture(loaded),
        )  # fmt: skip

    # -- test run ---------------------------------------------------------------------------------
    def test_run(
        self,
        config: RunConfig,
        progress: Callable[[StepDone], None],
        check: Check,
        *,
        measure_activations: bool = False,
    ) -> RunReport:
        """N seeded steps of the main model's diffusion network, placed through the manager (in the
        load's activation dtype where the settings chose its compute dtype: never fp8)."""
        comp, managed = self.component("diffusion_model")
        chosen = self.model(SlotId.MAIN).dtype_choice
        if chosen is not None:
            config = replace(config, dtype=chosen.activation_dtype)
        report = measured_test_run(
            comp, managed, self.placement, config, progress, check, measure_activations=measure_activations
        )
        moved = (
            f"; {in_mib(report.resident_bytes, 1)} resident on {report.placement}, "
            f"{in_mib(report.streamed_bytes_per_step, 1)} streamed per step"
            if self.placement.active
            else ""
        )
        self._event(
            "run",
            f"test run {report.seconds_per_step:.2f} s/step",
            f"{report.steps} steps at {report.width}x{report.height}, batch {report.batch}, "
            f"on {report.device}; peak RSS {in_mib(report.peak_rss)}{moved}",
        )
        return report


def _reads_control_picture(loaded: LoadedModel) -> bool:
    """Whether ``loaded``'s diffusion model reads a control picture of its own (FLUX.1 Canny/Depth
    [dev]: its input twice the latent's channels); a control LoRA's widening is the stack's."""
    for c in loaded.components:
        if c.role == "diffusion_model":
            try:
                channels = latent_format_for(c.family).channels
                return takes_control_picture(NetworkAdapter(c.module).in_channels, channels, False)
            except LoadoutError:
                return False
    return False
