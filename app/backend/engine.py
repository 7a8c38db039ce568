"""The engine the backend worker owns: the library index, the loaded models and the LoRA stack.

Plain Python over ``core`` (no Qt): every method runs on the worker thread and returns a frozen
snapshot (:mod:`app.backend.messages`). Long methods take ``progress`` and ``check`` callables and
pass them down to core, which reports typed progress and raises ``InterruptedByUser`` when the
check says stop. A stopped load changes nothing: the new model is only swapped in once complete.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil
import torch

from app.backend.messages import (
    ComponentInfo,
    EngineEvent,
    LoraInfo,
    ModelInfo,
    RunReport,
    StackInfo,
)
from app.backend.placement import Placement, PlacementConfig, PlacementInfo
from core.errors import LoadoutError
from core.library import Entry, InspectCache, LibraryIndex, ModelRoot, ScanProgress, roots_for
from core.loading.assign import LoadProgress
from core.loading.loader import (
    LoadedComponent,
    LoadOptions,
    load_checkpoint,
    load_diffusion_model,
    load_text_encoder,
    load_vae,
)
from core.memory.events import MemoryEvent
from core.memory.manager import NotEnoughMemoryError
from core.patching.lora_stack import LoraStack, compatible, component_name
from core.run.placed import StepPlacer
from core.run.testrun import RunConfig, StepDone, perform_test_run

Check = Callable[[], None]
MEMORY_WORDS = {
    "load": "placed",
    "partial_load": "partly placed",
    "unload": "offloaded",
    "partial_unload": "partly offloaded",
    "keep": "kept",
    "refuse": "refused",
    "interrupt": "stopped",
}
LOADABLE = ("checkpoint", "diffusion_model", "vae", "text_encoder")
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _checkpoint_components(path: Path, options: LoadOptions) -> list[LoadedComponent]:
    return load_checkpoint(path, options).components


@dataclass(frozen=True)
class Loaders:
    """How each kind of file is loaded (tests wrap these, e.g. to simulate a slow disk)."""

    checkpoint: Callable[[Path, LoadOptions], list[LoadedComponent]] = _checkpoint_components
    diffusion_model: Callable[[Path, LoadOptions], LoadedComponent] = load_diffusion_model
    vae: Callable[[Path, LoadOptions], LoadedComponent] = load_vae
    text_encoder: Callable[[Path, LoadOptions], LoadedComponent] = load_text_encoder


@dataclass
class _Loaded:
    key: str
    path: Path
    kind: str
    components: list[LoadedComponent]
    seconds: float
    managed: list[object] = field(default_factory=list)  # per component: its patcher, or its module

    @property
    def family(self) -> str | None:
        diffusion = [c for c in self.components if c.role == "diffusion_model"]
        return (diffusion or self.components)[0].family if self.components else None


@dataclass
class _RunStats:
    peak_rss: int = 0
    process: psutil.Process = field(default_factory=psutil.Process)

    def sample(self) -> None:
        self.peak_rss = max(self.peak_rss, int(self.process.memory_info().rss))


def _no_model() -> LoadoutError:
    return LoadoutError(
        "no model is loaded",
        why="LoRAs and test runs work on a loaded checkpoint or diffusion model",
        fix="Load one from the browser first (double-click it, or Ctrl+L)",
        code="no_model",
    )


def _dtype_name(module: torch.nn.Module) -> str:
    for p in module.parameters():
        if p.is_floating_point():
            return _DTYPE_NAMES.get(p.dtype, str(p.dtype).removeprefix("torch."))
    return "-"


def kind_word(role: str, family: str) -> str:
    if role == "diffusion_model":
        return "diffusion model"
    return "VAE" if role == "vae" else f"{role.replace('_', ' ')} {family}"


def _device_name(module: torch.nn.Module) -> str:
    p = next(module.parameters(), None)
    return str(p.device) if p is not None else "cpu"


class Engine:
    """Everything the window works on, owned by one thread at a time (the worker's)."""

    def __init__(
        self,
        *,
        cache: InspectCache | None = None,
        loaders: Loaders | None = None,
        emit: Callable[[EngineEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        placement: Placement | None = None,
    ) -> None:
        self.cache = cache
        self.loaders = loaders or Loaders()
        self.emit = emit or (lambda event: None)
        self.clock = clock
        self.index: LibraryIndex | None = None
        self.problems: list[str] = []
        self.loaded: dict[str, _Loaded] = {}
        self.stack: LoraStack | None = None
        self.dtype_overrides: dict[str, str] = {}
        self.placement = placement if placement is not None else Placement(None)
        self.placement.events.subscribe(self._memory_event)

    def _event(self, kind: str, label: str, reason: str) -> None:
        self.emit(EngineEvent(self.clock(), kind, label, reason))

    def _memory_event(self, event: MemoryEvent) -> None:
        """A memory-manager decision, relayed as it happens (on the worker thread)."""
        words = MEMORY_WORDS.get(event.kind, event.kind)
        label = f"{words} {event.model}".strip()
        self.emit(EngineEvent(event.timestamp, event.kind, label, event.reason))

    # -- library ------------------------------------------------------------------------------
    def scan(
        self, folders: Sequence[str | Path], progress: Callable[[ScanProgress], None], check: Check
    ) -> Iterator[Entry]:
        """Index ``folders`` (installs, yaml files or plain folders); a rescan of the same roots
        reuses what the index already read."""
        problems: list[LoadoutError] = []
        roots: list[ModelRoot] = roots_for(folders, problems, plain_origin="folder")
        if self.index is None or self.index.roots != tuple(roots):
            self.index = LibraryIndex(roots, cache=self.cache)
        try:
            yield from self.index.scan(progress=progress, check=check)
        finally:
            self.problems = [p.message for p in problems] + self.index.problems

    # -- loading ------------------------------------------------------------------------------
    def load(
        self, path: Path, kind: str, progress: Callable[[LoadProgress], None], check: Check
    ) -> ModelInfo:
        if kind not in LOADABLE:
            what = kind.replace("_", " ")
            raise LoadoutError(
                f"{path.name} is a {what}, which cannot be loaded on its own",
                why="only checkpoints, diffusion models, VAEs and text encoders load as models",
                fix="Add a LoRA to the LoRA stack of a loaded model instead" if kind == "lora" else "",
                code="not_loadable",
            )
        options = LoadOptions(progress=progress, check=check)
        t0 = time.perf_counter()
        if kind == "checkpoint":
            components = self.loaders.checkpoint(path, options)
        else:
            components = [getattr(self.loaders, kind)(path, options)]
        check()  # a stop pressed after the last tensor still leaves the old state in place
        self._apply_dtype_overrides(components)
        seconds = time.perf_counter() - t0
        key = "main" if kind in ("checkpoint", "diffusion_model") else f"{kind}:{components[0].family}"
        previous = self.loaded.get(key)
        if previous is not None:
            self._release(previous)
        loaded = _Loaded(key, path, kind, components, seconds)
        self.loaded[key] = loaded
        stack = None
        if key == "main":
            stack = self.stack = LoraStack([c for c in components if c.role != "vae"])
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
        where = (
            f"in system RAM, memory-mapped from the file; Load to GPU (Ctrl+G) places it on "
            f"{self.placement.describe().label}"
            if self.placement.active
            else "in system RAM, memory-mapped from the file; computed on the CPU (no GPU)"
        )
        self._event(
            "load",
            f"load {path.name}",
            f"{len(components)} component(s), {info.bytes / 2**20:.1f} MiB in {seconds:.2f} s; {where}",
        )
        return info

    def _register(self, loaded: _Loaded) -> None:
        for comp, obj in zip(loaded.components, loaded.managed, strict=True):
            self.placement.register(obj, f"{loaded.path.stem} {kind_word(comp.role, comp.family)}")

    def _release(self, loaded: _Loaded) -> None:
        for obj in loaded.managed:  # also without a device: a card switched off left them tracked
            self.placement.release(obj)

    def _apply_dtype_overrides(self, components: list[LoadedComponent]) -> None:
        for comp in components:
            name = self.dtype_overrides.get(comp.role)
            dtype = TORCH_DTYPES.get(name or "")
            if dtype is not None and _dtype_name(comp.module) != name:
                comp.module.to(dtype)

    def unload(self, key: str) -> None:
        loaded = self.loaded.get(key)
        if loaded is None:
            return
        self._release(loaded)  # first: if it fails, the model is still listed and can be retried
        del self.loaded[key]
        if key == "main":
            self.stack = None
        name = loaded.path.name
        del loaded
        self._event("unload", f"unload {name}", "you unloaded it; its memory is released")

    # -- placement (the memory manager) -----------------------------------------------------------
    def _loaded(self, key: str) -> _Loaded:
        loaded = self.loaded.get(key)
        if loaded is None:
            raise LoadoutError(
                "that model is no longer loaded", fix="Pick one in Loaded models", code="not_loaded"
            )
        return loaded

    def _need_device(self) -> None:
        if not self.placement.active:
            info = self.placement.describe()
            raise LoadoutError(
                "there is no GPU to place models on",
                why=info.reason,
                fix="Models compute on the CPU from RAM. To see the memory manager at work without a GPU, "
                "set a simulated card in Settings > Memory",
                code="no_device",
            )

    def _objects(self, key: str, role: str | None) -> list[object]:
        loaded = self._loaded(key)
        pairs = zip(loaded.components, loaded.managed, strict=True)
        return [obj for c, obj in pairs if role is None or c.role == role]

    def place(self, key: str, role: str | None = None) -> tuple[ModelInfo, ...]:
        """Load a model's components (or the one with ``role``) to the GPU: fully, or partly with
        the rest streaming. The memory manager decides, evicting others if needed, and says why."""
        self._need_device()
        objects = self._objects(key, role)
        result = self.placement.place(objects)
        if result.refused:
            loaded = self._loaded(key)
            pairs = zip(loaded.components, loaded.managed, strict=True)
            done = [kind_word(c.role, c.family) for c, obj in pairs if self.placement.is_placed(obj)]
            placed = f" ({', '.join(done)} placed)" if done else ""
            raise NotEnoughMemoryError(
                f"not enough GPU memory for all of {loaded.path.name}{placed}",
                why=result.refused[0],
                fix="Offload other models, lower 'Keep free for other apps' in Settings > Memory, or place "
                "the components one by one (select a component row in Loaded models)",
            )
        return self.models()

    def offload(self, key: str, role: str | None = None) -> tuple[ModelInfo, ...]:
        """Move a model's components (or one) back to system RAM (their memory-mapped tensors)."""
        self._need_device()
        self.placement.offload(self._objects(key, role))
        return self.models()

    def configure_placement(self, config: PlacementConfig) -> PlacementInfo:
        """New memory settings: everything returns to RAM, then the new device takes over."""
        was = self.placement.active
        self.placement.configure(config)
        if was and not self.placement.active and self.stack is not None:
            self.stack.apply()  # computed on the CPU from now on: bake the stack into the weights
        elif not was and self.placement.active:
            if self.stack is not None:
                self.stack.unpatch()  # the mover applies the stack when it places a model
            for loaded in self.loaded.values():
                self._register(loaded)
        info = self.placement.describe()
        self._event("settings", f"memory: {info.label}", info.reason)
        return info

    def models(self) -> tuple[ModelInfo, ...]:
        return tuple(self._info(m) for m in self.loaded.values())

    def _info(self, loaded: _Loaded) -> ModelInfo:
        patched: dict[str, int] = {}
        if self.stack is not None and loaded.key == "main":
            for name, patcher in self.stack.patchers.items():
                patched[name] = len(patcher.patched_keys())
        comps = []
        for c, obj in zip(loaded.components, loaded.managed, strict=True):
            on_device, streamed = self.placement.placement_of(obj) if self.placement.active else (0, 0)
            placed = self.placement.is_placed(obj) if self.placement.active else False
            device = (self.placement.target or "cpu") if placed else _device_name(c.module)
            info = ComponentInfo(
                c.role, c.family, _dtype_name(c.module), c.nbytes, device,
                0 if c.role == "vae" else patched.get(component_name(c), 0),
                placed, on_device, streamed,
            )  # fmt: skip
            comps.append(info)
        return ModelInfo(loaded.key, loaded.path, loaded.kind, loaded.family, tuple(comps), loaded.seconds)

    # -- LoRA stack ---------------------------------------------------------------------------
    def _stack(self) -> LoraStack:
        if self.stack is None:
            raise _no_model()
        return self.stack

    def add_lora(self, path: Path, model: float, clip: float, force: bool) -> StackInfo:
        stack = self._stack()
        entry = stack.add(path, model, clip, force=force)
        try:
            n = self._sync()
        except Exception:
            stack.remove(entry.id)
            self._sync()
            raise
        keys = sum(len(k) for k in entry.keys.values())
        done = f"{n} weights patched"
        if self.placement.active:
            placed = any(self.placement.is_placed(p) for p in stack.patchers.values())
            done = (
                f"{keys} weights patched: {n} placed copies recomputed, streamed layers at each step"
                if placed
                else f"{keys} weights to patch when the model is placed"
            )
        self._event(
            "lora",
            f"LoRA {path.name}",
            f"{len(entry.report.matched)} modules matched, {len(entry.report.unmatched)} unmatched; "
            f"{done} (model {entry.model_strength:g}, text encoder {entry.clip_strength:g})",
        )
        return self.stack_info(recomputed=n)

    def set_strength(self, lora_id: str, model: float | None, clip: float | None, bake: bool) -> StackInfo:
        stack = self._stack()
        if lora_id not in stack.entries:
            return self.stack_info()
        stack.set_strength(lora_id, model=model, clip=clip)
        if not bake and not self.placement.active and stack.preview():
            return self.stack_info(baked=False)
        return self.stack_info(recomputed=self._sync())

    def set_enabled(self, lora_id: str, enabled: bool) -> StackInfo:
        stack = self._stack()
        stack.set_enabled(lora_id, enabled)
        return self._bake()

    def remove_lora(self, lora_id: str) -> StackInfo:
        stack = self._stack()
        name = stack.entries[lora_id].path.name
        stack.remove(lora_id)
        info = self._bake()
        self._event("lora", f"remove {name}", "removed; its changes were taken out of the weights")
        return info

    def reorder(self, order: Sequence[str]) -> StackInfo:
        self._stack().reorder(order)
        return self._bake()

    def _bake(self) -> StackInfo:
        return self.stack_info(recomputed=self._sync())

    def _sync(self) -> int:
        """Make the weights follow the stack; returns how many were recomputed. On the CPU the
        stack is baked into the weights; with a device, the placed copies are updated (the RAM
        copy stays the file's tensors) and what is not placed gets the stack when it is."""
        stack = self._stack()
        if self.placement.active:
            return sum(self.placement.refresh(p) for p in stack.patchers.values())
        return sum(r.recomputed for r in stack.apply().values())

    def stack_info(self, *, baked: bool = True, recomputed: int = 0) -> StackInfo:
        if self.stack is None:
            return StackInfo(None)
        fam = self.stack.model_family
        loras = []
        for e in self.stack.entries.values():
            warning = None
            if fam is not None and not compatible(e.base_family, fam):
                warning = f"made for {e.base_family}, the loaded model is {fam}: only what fits is applied"
            info = LoraInfo(
                e.id, e.path, e.base_family, e.model_strength, e.clip_strength, e.enabled,
                len(e.report.matched), len(e.report.unmatched), len(e.skipped),
                len(e.report.shape_mismatches), warning, e.analysis.summary.format, tuple(e.keys),
            )  # fmt: skip
            loras.append(info)
        return StackInfo(fam, tuple(loras), baked, recomputed, self._applied_words())

    def _applied_words(self) -> str:
        if not self.placement.active or self.stack is None:
            return "baked into the weights"
        if any(self.placement.is_placed(p) for p in self.stack.patchers.values()):
            return (
                f"applied on {self.placement.describe().label}: placed weights patched there, "
                "streamed layers at each step; the RAM copy stays the file's"
            )
        return "recorded; applied when the model is placed (Load to GPU, or a test run)"

    # -- test run -----------------------------------------------------------------------------
    def test_run(self, config: RunConfig, progress: Callable[[StepDone], None], check: Check) -> RunReport:
        main = self.loaded.get("main")
        pairs = zip(main.components, main.managed, strict=True) if main else iter(())
        found = [(c, obj) for c, obj in pairs if c.role == "diffusion_model"]
        if not found:
            raise _no_model()
        comp, managed = found[0]
        module = comp.module
        stats = _RunStats()
        stats.sample()
        placement = self.placement
        if placement.active:
            config = replace(config, device=placement.manager.device)
        cuda = config.device.startswith("cuda")
        if cuda:
            torch.cuda.reset_peak_memory_stats(config.device)
        place = StepPlacer(placement.manager, placement.mover, managed) if placement.active else None

        def step(done: StepDone) -> None:
            stats.sample()
            progress(done)

        t0 = time.perf_counter()
        result = perform_test_run(module, config, check=check, progress=step, before_step=place)
        total = time.perf_counter() - t0
        resident, streamed = place.finish() if place is not None else (0, 0)
        peak_vram = int(torch.cuda.max_memory_allocated(config.device)) if cuda else None
        if place is not None and not cuda:
            peak_vram = place.peak_placed  # a simulated card: what the manager placed on it
        where = placement.describe().label if placement.active else ""
        report = RunReport(
            config.steps, config.width, config.height, config.batch, result.seconds_per_step, total,
            config.device, _DTYPE_NAMES.get(config.dtype, str(config.dtype)), stats.peak_rss, peak_vram,
            result.output_summary(), resident, streamed, where,
        )  # fmt: skip
        moved = (
            f"; {resident / 2**20:.1f} MiB resident on {where}, {streamed / 2**20:.1f} MiB streamed per step"
            if placement.active
            else ""
        )
        self._event(
            "run",
            f"test run {report.seconds_per_step:.2f} s/step",
            f"{config.steps} steps at {config.width}x{config.height}, batch {config.batch}, "
            f"on {config.device}; peak RSS {report.peak_rss / 2**20:.0f} MiB{moved}",
        )
        return report


def default_cache_path(folder: str | os.PathLike[str]) -> Path:
    return Path(folder) / "inspect-cache.sqlite"
