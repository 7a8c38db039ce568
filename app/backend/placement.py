"""Where loaded models compute: the memory manager, its torch mover and the device they place on.

Qt-free; built by the composition root, used only on the worker thread (the GUI reads
:attr:`Placement.probe` for the plot and :meth:`Placement.describe` snapshots).

The device is the first accelerator found (CUDA/ROCm, MPS, XPU). Without one, Loadout computes on
the CPU from system RAM and nothing is "placed" (:attr:`active` is False) — unless the user asks
for a **simulated card**: the manager then sees a GPU of that size on the CPU and really plans,
evicts and streams, which is how an artist without a GPU (and the demo, and the tests) sees the
memory manager at work. On a real GPU the same setting caps the card (a smaller card simulated).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.memory.devices import DeviceInfo, cpu_device, discover_devices, format_gib
from core.memory.events import EventLog
from core.memory.manager import LoadResult, ManagedModel, MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.memory.policy import (
    MemorySettings,
    VramDecision,
    VramState,
    choose_vram_state,
    minimum_inference_bytes,
    reserve_bytes,
)
from core.memory.probes import CpuProbe, LimitedProbe, MemoryProbe, probe_for
from core.patching.patcher import ModelPatcher
from core.run.placed import default_memory_required


@dataclass(frozen=True)
class PlacementConfig:
    """What the user chose: memory settings and an optional card size (bytes; 0 = the real card,
    or no GPU). ``inference_bytes`` overrides the activation headroom (the demo's tiny card)."""

    settings: MemorySettings = field(default_factory=MemorySettings)
    simulate_bytes: int = 0
    inference_bytes: int | None = None


@dataclass(frozen=True)
class PlacementInfo:
    """What the window shows about placement (crosses the thread boundary)."""

    active: bool  # models can be placed on a device (a real GPU or a simulated one)
    device: str  # torch device the manager places on ("cuda:0", "cpu" when simulated)
    label: str  # "NVIDIA ... (cuda:0, 24 GiB, CC 8.6)" / "Simulated 12 MiB card (on the CPU)"
    vram_state: str
    reason: str  # why this VRAM state
    simulated: bool = False


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n < 2**30 else format_gib(n)


class Placement:
    def __init__(
        self,
        accelerator: DeviceInfo | None,
        config: PlacementConfig | None = None,
        *,
        events: EventLog | None = None,
        interrupt: threading.Event | None = None,
    ) -> None:
        self.accelerator = accelerator
        self.events = events if events is not None else EventLog()
        self.mover = TorchMover()
        self.manager = MemoryManager(lambda: 0, self.mover, device="cpu", events=self.events)
        if interrupt is not None:
            self.manager.interrupt = interrupt
        self.mover.interrupt = self.manager.check
        self.probe: MemoryProbe | None = None
        self.monitor_probe: MemoryProbe | None = None  # what the plot samples (a GPU set not to be used too)
        self.decision: VramDecision | None = None
        self.config = PlacementConfig()
        self.configure(config or PlacementConfig())

    @classmethod
    def discover(cls, config: PlacementConfig | None = None, **kwargs: object) -> Placement:
        accelerators = [d for d in discover_devices() if d.is_accelerator]
        return cls(accelerators[0] if accelerators else None, config, **kwargs)  # type: ignore[arg-type]

    # -- configuration ----------------------------------------------------------------------------
    def configure(self, config: PlacementConfig) -> None:
        """Apply new settings. Everything placed goes back to RAM first (the caller re-places)."""
        self.manager.unload_all("the memory settings changed")
        self.config = config
        settings = config.settings
        probe: MemoryProbe | None
        if self.accelerator is not None:
            probe = probe_for(self.accelerator)
            if config.simulate_bytes > 0:
                probe = LimitedProbe(probe, config.simulate_bytes)
            target = "cuda" if self.accelerator.kind in ("cuda", "rocm") else self.accelerator.kind
        elif config.simulate_bytes > 0:
            cpu = CpuProbe(cpu_device(_ram_total(), name="Simulated GPU"))
            probe = LimitedProbe(cpu, config.simulate_bytes, charge=self.placed_bytes)
            target = "cpu"
        else:
            probe, target = None, "cpu"
        decision = choose_vram_state(probe.device, probe.total(), settings) if probe is not None else None
        self.monitor_probe = probe
        if decision is not None and decision.state is VramState.DISABLED:
            probe = None
        self.probe, self.decision = probe, decision
        if probe is None:
            return
        reserve = reserve_bytes(probe.device, probe.total(), sys.platform, settings)
        inference = (
            config.inference_bytes
            if config.inference_bytes is not None
            else minimum_inference_bytes(reserve, settings)
        )
        assert decision is not None
        state = decision.state.value.replace("-", "_")
        self.manager.settings = PlanSettings(
            vram_state=state, reserve_bytes=reserve, min_inference_bytes=inference
        )
        self.manager.free_bytes = probe.free
        self.manager.device = target

    @property
    def active(self) -> bool:
        return self.probe is not None

    @property
    def target(self) -> str | None:
        return self.manager.device if self.active else None

    def describe(self) -> PlacementInfo:
        if self.probe is None or self.decision is None:
            why = "no GPU was found" if self.accelerator is None else "the VRAM mode is set to no GPU"
            reason = f"Computed on the CPU: {why}."
            return PlacementInfo(False, "cpu", "CPU and system RAM", "disabled", reason)
        dev = self.probe.device
        simulated = self.accelerator is None
        label = f"Simulated {_mib(self.probe.total())} GPU (on the CPU)" if simulated else dev.label
        return PlacementInfo(
            True, self.manager.device, label, self.decision.state.value, self.decision.reason, simulated
        )

    # -- models -----------------------------------------------------------------------------------
    def register(self, model: object, name: str) -> ManagedModel:
        """Track ``model`` (a ``ModelPatcher``: its stack is applied on placement, or a module)."""
        if isinstance(model, ModelPatcher):
            self.mover.use_patcher(model)
        return self.manager.register(model, name)

    def place(self, models: Sequence[object], memory_required: int = 0) -> LoadResult:
        """Place ``models`` with room for ``memory_required`` bytes of activations (0: one image
        at each model's usual size, predicted by ``core.memory.inference``)."""
        need = memory_required or default_memory_required(self.manager, models)
        return self.manager.load_models(models, need)

    def offload(self, models: Sequence[object], why: str = "you offloaded it") -> LoadResult:
        return self.manager.unload_models(models, why)

    def refresh(self, model: object) -> int:
        """Bring a changed LoRA stack onto ``model``'s placed weights (0 when not placed)."""
        entry = self.entry(model)
        return self.mover.refresh(entry) if entry is not None else 0

    def entry(self, model: object) -> ManagedModel | None:
        return self.manager.find(model)

    def is_placed(self, model: object) -> bool:
        e = self.entry(model)
        return e is not None and (bool(e.loaded_modules) or e.streaming)

    def placement_of(self, model: object) -> tuple[int, int]:
        """(bytes resident on the device, bytes that stream from RAM at each forward)."""
        e = self.entry(model)
        if e is None or not (e.loaded_modules or e.streaming):
            return 0, 0
        on_device = e.loaded_bytes
        return on_device, (e.total_bytes - on_device if e.streaming else 0)

    def release(self, model: object) -> None:
        """The app drops ``model``: off the device, originals back, streaming stopped, and the
        manager forgets it (its name is free for the next model; no "dropped" event follows)."""
        if self.is_placed(model):
            self.manager.unload_models([model], "its file was unloaded")
        self.mover.release(model)
        self.manager.forget(model)

    def placed_bytes(self) -> int:
        """What the manager has placed on the device (lock-free: the GUI thread reads it too)."""
        return sum(info.device_bytes for info in self.manager.loaded())


def _ram_total() -> int:
    import psutil

    return int(psutil.virtual_memory().total)
