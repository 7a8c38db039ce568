"""``loadout run``: load a model and its LoRAs, place it through the memory manager, run the test
run, and report what it cost. The app's "Test run" uses the same pieces.

With ``vram_limit`` the manager sees a card of that size (on the CPU too: it then really streams
the layers that do not fit, so the lowvram path runs). The output is bit-identical whatever the
limit and whether LoRAs are baked (resident layers) or applied at cast time (streamed layers).
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.errors import LoadoutError
from core.loading.loader import (
    LoadedComponent,
    LoadOptions,
    inspect_for_loading,
    load_checkpoint,
    load_diffusion_model,
)
from core.memory.devices import DeviceInfo, discover_devices
from core.memory.inference import Workload
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.memory.policy import MemorySettings, choose_vram_state, minimum_inference_bytes, reserve_bytes
from core.memory.probes import LimitedProbe, MemoryProbe, probe_for
from core.memory.tracking import ActivationTracker
from core.patching.lora_stack import LoraStack
from core.patching.merge import LoraArg
from core.run.placed import StepPlacer
from core.run.testrun import RunConfig, perform_test_run


@dataclass(frozen=True)
class RunRequest:
    model: Path
    loras: tuple[LoraArg, ...] = ()
    config: RunConfig = field(default_factory=RunConfig)
    device: str = "cpu"
    vram_limit: int | None = None
    settings: MemorySettings = field(default_factory=MemorySettings)
    measure_activations: bool = True  # count live activation tensors (costs Python time per op)


def _device(name: str) -> DeviceInfo:
    kind = name.split(":")[0]
    for dev in discover_devices():
        if dev.kind == kind or (kind == "cuda" and dev.kind == "rocm"):
            return dev
    raise LoadoutError(
        f"no {name} device here",
        why="it was not found on this machine",
        fix="Use --device cpu, or check the GPU driver",
        code="no_device",
    )


def _diffusion(path: Path) -> tuple[LoadedComponent, list[LoadedComponent], str | None]:
    _, det = inspect_for_loading(path)
    if det.kind == "checkpoint":
        bundle = load_checkpoint(path, LoadOptions())
        assert bundle.diffusion_model is not None
        return bundle.diffusion_model, bundle.components, det.family
    comp = load_diffusion_model(path)
    return comp, [comp], det.family


def _peak_bytes(device: str) -> int:
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def run_model(request: RunRequest, *, manager_out: list[MemoryManager] | None = None) -> dict[str, Any]:
    """Everything ``loadout run --json`` prints. ``manager_out`` receives the manager (so a
    Ctrl-C handler can set its interrupt flag)."""
    device = _device(request.device)
    target = "cuda" if device.kind in ("cuda", "rocm") else device.kind
    diffusion, components, family = _diffusion(request.model)
    stack = LoraStack(components)
    for arg in request.loras:
        stack.add(arg.path, arg.model, arg.clip)
    patcher = stack.patchers["diffusion_model"]  # recorded, never baked: the mover applies it

    mover = TorchMover()
    mover.use_patcher(patcher)
    managers: list[MemoryManager] = []  # the manager, once built (the simulated card charges it)
    probe: MemoryProbe = probe_for(device)
    if request.vram_limit is not None:

        def placed_bytes() -> int:
            return sum(info.device_bytes for m in managers for info in m.loaded())

        probe = LimitedProbe(probe, request.vram_limit, charge=placed_bytes if target == "cpu" else None)
    total = probe.total()
    vram = choose_vram_state(probe.device, total, request.settings)
    # On the CPU without a simulated card, RAM is the device: the model is "loaded" (zero-copy for
    # unpatched weights, LoRAs applied on the way) like on a card large enough for it.
    cpu_only = target == "cpu" and request.vram_limit is None
    state = "normal" if cpu_only else vram.state.name.lower()
    reserve = reserve_bytes(probe.device, total, sys.platform, request.settings)
    settings = PlanSettings(
        vram_state=state,
        reserve_bytes=reserve,
        min_inference_bytes=minimum_inference_bytes(reserve, request.settings),
    )
    manager = MemoryManager(probe.free, mover, settings=settings, device=target)
    managers.append(manager)
    mover.interrupt = manager.check
    if manager_out is not None:
        manager_out.append(manager)
    manager.register(patcher, f"{family or 'model'} diffusion model")
    cfg = request.config
    # activations: predicted by the measured model (unless the user fixed them), measured by the tracker
    attention = "cpu_flash" if target == "cpu" else "cuda_flash"
    work = Workload(cfg.width, cfg.height, cfg.batch, cfg.dtype.itemsize, attention)
    fixed = 0 if request.settings.min_inference_bytes is not None else None  # the floor then says it all
    place = StepPlacer(manager, mover, patcher, work, memory_required=fixed)
    run_cfg = RunConfig(cfg.steps, cfg.width, cfg.height, cfg.batch, cfg.seed, cfg.dtype, target)
    tracker = ActivationTracker()
    with tracker if request.measure_activations else contextlib.nullcontext():
        result = perform_test_run(diffusion.module, run_cfg, check=manager.check, before_step=place)
    resident, streamed_per_step = place.finish()
    return {
        "model": str(request.model),
        "family": family,
        "device": device.label,
        "dtype": str(cfg.dtype).removeprefix("torch."),
        "steps": cfg.steps,
        "seconds_per_step": round(result.seconds_per_step, 4),
        "resident_bytes": resident,
        "streamed_bytes_per_step": streamed_per_step,
        "peak_bytes": _peak_bytes(target),
        "inference_bytes_predicted": place.predicted,
        "inference_bytes_measured": tracker.peak_bytes if request.measure_activations else None,
        "vram_state": state,
        "vram_reason": vram.reason,
        "events": [e.to_json() for e in manager.events.events()],
        "output": result.output_summary(),
        "loras": [
            {"path": str(e.path), "matched": len(e.report.matched), "unmatched": len(e.report.unmatched)}
            for e in stack.entries.values()
        ],
        "pid": os.getpid(),
    }


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise LoadoutError(
            f"size {text!r} is not WIDTHxHEIGHT", fix="Write it like 1024x1024", code="bad_argument"
        ) from None
    return w, h


def parse_bytes(text: str) -> int:
    k, m, g = 1 << 10, 1 << 20, 1 << 30
    units = {"": 1, "b": 1, "k": k, "kb": k, "kib": k, "m": m, "mb": m, "mib": m, "g": g, "gb": g, "gib": g}
    s = text.strip().lower()
    num = s.rstrip("kmgib")
    try:
        return int(float(num) * units[s[len(num) :]])
    except (ValueError, KeyError):
        raise LoadoutError(f"{text!r} is not a size in bytes", fix="Write e.g. 4GiB, 512MiB or 4294967296",
                           code="bad_argument") from None  # fmt: skip
