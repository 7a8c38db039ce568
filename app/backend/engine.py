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
from dataclasses import dataclass, field
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
from core.patching.lora_stack import LoraStack, compatible, component_name
from core.run.testrun import RunConfig, StepDone, perform_test_run

Check = Callable[[], None]
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

    def _event(self, kind: str, label: str, reason: str) -> None:
        self.emit(EngineEvent(self.clock(), kind, label, reason))

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
        loaded = _Loaded(key, path, kind, components, seconds)
        self.loaded[key] = loaded
        if key == "main":
            self.stack = LoraStack([c for c in components if c.role != "vae"])
        if previous is not None:
            self._event("unload", f"unload {previous.path.name}", f"replaced by {path.name}")
            del previous  # freed by reference counting (no gc.collect: a full collection holds the
            # GIL for 100+ ms and would stall the GUI thread)
        info = self._info(loaded)
        self._event(
            "load",
            f"load {path.name}",
            f"{len(components)} component(s), {info.bytes / 2**20:.1f} MiB in {seconds:.2f} s; kept in "
            "system RAM (CPU placement until the memory manager lands)",
        )
        return info

    def _apply_dtype_overrides(self, components: list[LoadedComponent]) -> None:
        for comp in components:
            name = self.dtype_overrides.get(comp.role)
            dtype = TORCH_DTYPES.get(name or "")
            if dtype is not None and _dtype_name(comp.module) != name:
                comp.module.to(dtype)

    def unload(self, key: str) -> None:
        loaded = self.loaded.pop(key, None)
        if loaded is None:
            return
        if key == "main":
            self.stack = None
        name = loaded.path.name
        del loaded
        self._event("unload", f"unload {name}", "you unloaded it; its memory is released")

    def models(self) -> tuple[ModelInfo, ...]:
        return tuple(self._info(m) for m in self.loaded.values())

    def _info(self, loaded: _Loaded) -> ModelInfo:
        patched: dict[str, int] = {}
        if self.stack is not None and loaded.key == "main":
            for name, patcher in self.stack.patchers.items():
                patched[name] = len(patcher.patched_keys())
        comps = tuple(
            ComponentInfo(
                c.role,
                c.family,
                _dtype_name(c.module),
                c.nbytes,
                _device_name(c.module),
                0 if c.role == "vae" else patched.get(component_name(c), 0),
            )
            for c in loaded.components
        )
        return ModelInfo(loaded.key, loaded.path, loaded.kind, loaded.family, comps, loaded.seconds)

    # -- LoRA stack ---------------------------------------------------------------------------
    def _stack(self) -> LoraStack:
        if self.stack is None:
            raise _no_model()
        return self.stack

    def add_lora(self, path: Path, model: float, clip: float, force: bool) -> StackInfo:
        stack = self._stack()
        entry = stack.add(path, model, clip, force=force)
        try:
            reports = stack.apply()
        except Exception:
            stack.remove(entry.id)
            stack.apply()
            raise
        n = sum(r.recomputed for r in reports.values())
        self._event(
            "lora",
            f"LoRA {path.name}",
            f"{len(entry.report.matched)} modules matched, {len(entry.report.unmatched)} unmatched; "
            f"{n} weights patched (model {entry.model_strength:g}, text encoder {entry.clip_strength:g})",
        )
        return self.stack_info(recomputed=n)

    def set_strength(self, lora_id: str, model: float | None, clip: float | None, bake: bool) -> StackInfo:
        stack = self._stack()
        if lora_id not in stack.entries:
            return self.stack_info()
        stack.set_strength(lora_id, model=model, clip=clip)
        if not bake and stack.preview():
            return self.stack_info(baked=False)
        reports = stack.apply()
        return self.stack_info(recomputed=sum(r.recomputed for r in reports.values()))

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
        reports = self._stack().apply()
        return self.stack_info(recomputed=sum(r.recomputed for r in reports.values()))

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
        return StackInfo(fam, tuple(loras), baked, recomputed)

    # -- test run -----------------------------------------------------------------------------
    def test_run(self, config: RunConfig, progress: Callable[[StepDone], None], check: Check) -> RunReport:
        main = self.loaded.get("main")
        diffusion = [c for c in main.components if c.role == "diffusion_model"] if main else []
        if not diffusion:
            raise _no_model()
        module = diffusion[0].module
        stats = _RunStats()
        stats.sample()
        cuda = config.device.startswith("cuda")
        if cuda:
            torch.cuda.reset_peak_memory_stats(config.device)

        def step(done: StepDone) -> None:
            stats.sample()
            progress(done)

        t0 = time.perf_counter()
        result = perform_test_run(module, config, check=check, progress=step)
        total = time.perf_counter() - t0
        peak_vram = int(torch.cuda.max_memory_allocated(config.device)) if cuda else None
        report = RunReport(
            config.steps, config.width, config.height, config.batch, result.seconds_per_step, total,
            config.device, _DTYPE_NAMES.get(config.dtype, str(config.dtype)), stats.peak_rss, peak_vram,
            result.output_summary(),
        )  # fmt: skip
        self._event(
            "run",
            f"test run {report.seconds_per_step:.2f} s/step",
            f"{config.steps} steps at {config.width}x{config.height}, batch {config.batch}, "
            f"on {config.device}; peak RSS {report.peak_rss / 2**20:.0f} MiB",
        )
        return report


def default_cache_path(folder: str | os.PathLike[str]) -> Path:
    return Path(folder) / "inspect-cache.sqlite"
