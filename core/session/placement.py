"""Where loaded models compute: the probe, the memory manager and its torch mover, built together.

A :class:`Placement` is built complete from a device and a :class:`PlacementConfig` and never
patched afterwards: new settings build a new one (:meth:`Placement.reconfigured`), which shares
the event log and the interrupt flag of the old. This is the one place in Loadout that builds a
``MemoryManager`` for real use; the window, ``loadout run`` and the generate pipeline all go
through it.

The device is the first accelerator found (CUDA/ROCm, MPS, XPU). Without one, Loadout computes on
the CPU from system RAM and nothing is "placed" (:attr:`Placement.active` is False) — unless the
user asks for a **simulated card**: the manager then sees a GPU of that size on the CPU and really
plans, evicts and streams. On a real GPU the same setting caps the card. ``loadout run`` places on
the device it names, the CPU included (``cpu_is_device``): RAM is then the device, and the model
is "loaded" through the mover like on a card large enough for it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import psutil

from core.memory.devices import DeviceInfo, cpu_device, discover_devices
from core.memory.dtypes import DtypePolicy
from core.memory.events import EventLog
from core.memory.inference import network_profile
from core.memory.managed import ManagedModel
from core.memory.manager import LoadResult, MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.memory.policy import (
    MemorySettings,
    VramDecision,
    VramState,
    choose_vram_state,
    minimum_inference_bytes,
    pinned_memory_cap,
    reserve_bytes,
)
from core.memory.probes import LimitedProbe, MemoryProbe, probe_for
from core.memory.step_placer import Profile, default_memory_required
from core.patching.patcher import ModelPatcher
from core.units import GIB, card_size, in_mib


@dataclass(frozen=True)
class PlacementConfig:
    """What the user chose: memory settings and an optional card size (bytes; 0 = the real card,
    or no GPU). ``inference_bytes`` overrides the activation headroom (the demo's tiny card)."""

    settings: MemorySettings = field(default_factory=MemorySettings)
    simulate_bytes: int = 0
    inference_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class MemoryFigures:
    """The placement's memory at one moment, taken on the thread that owns the session: plain data
    that crosses to the window. The window's plot samples a probe of its own, built on its thread
    from these (:func:`monitor_probe`); the backend sends fresh figures after every memory decision.
    """

    device: DeviceInfo | None = None  # what the plot samples (also a GPU set not to be used)
    limit_bytes: int = 0  # a simulated card's size on ``device`` (0: the whole device)
    charged: bool = False  # the simulated card is on the CPU: what it holds is ``placed_bytes``
    placed_bytes: int = 0  # what the manager has placed on the device
    headroom: int | None = None  # the manager's inference headroom; None when nothing is placed
    headroom_fixed: bool = False  # the user fixed it: it stands for the activations


def monitor_probe(figures: MemoryFigures, placed: Callable[[], int] | None = None) -> MemoryProbe | None:
    """A new probe of ``figures``' device for the thread that samples it; a simulated card on the
    CPU counts ``placed()`` as its use (the placement's own bytes, or the latest figures')."""
    if figures.device is None:
        return None
    probe = probe_for(figures.device)
    if figures.limit_bytes > 0:
        charge = (placed or (lambda: figures.placed_bytes)) if figures.charged else None
        probe = LimitedProbe(probe, figures.limit_bytes, charge=charge)
    return probe


@dataclass(frozen=True)
class PlacementInfo:
    """What the window shows about placement (crosses the thread boundary)."""

    active: bool  # models can be placed on a device (a real GPU or a simulated one)
    device: str  # torch device the manager places on ("cuda:0", "cpu" when simulated)
    label: str  # "NVIDIA ... (cuda:0, 24 GiB, CC 8.6)" / "Simulated 12 MiB card (on the CPU)"
    vram_state: str
    reason: str  # why this VRAM state
    simulated: bool = False
    has_gpu: bool = False  # a real accelerator exists (even when set not to be used)
    memory: MemoryFigures = field(default_factory=MemoryFigures, compare=False)


def _simulated_size(n: int) -> str:
    return card_size(n) if n >= GIB else in_mib(n)


def _ram_total() -> int:
    return int(psutil.virtual_memory().total)


class Placement:
    """Probe + manager + mover for one device and one configuration (immutable once built)."""

    def __init__(
        self,
        accelerator: DeviceInfo | None,
        config: PlacementConfig | None = None,
        *,
        events: EventLog | None = None,
        interrupt: threading.Event | None = None,
        cpu_is_device: bool = False,
    ) -> None:
        self.accelerator = accelerator if accelerator is None or accelerator.kind != "cpu" else None
        self.cpu = accelerator if accelerator is not None and accelerator.kind == "cpu" else None
        self.config = config or PlacementConfig()
        self.events = events if events is not None else EventLog()
        self.interrupt = interrupt if interrupt is not None else threading.Event()
        self.cpu_is_device = cpu_is_device
        self._profiles: dict[int, Profile] = {}  # id(registered model) -> its activation profile
        self._source = MemoryFigures()  # what the plot samples (a GPU set not to be used too)
        probe, target, forced = self._probe()
        settings = self.config.settings
        decision = choose_vram_state(probe.device, probe.total(), settings) if probe is not None else None
        if decision is not None and decision.state is VramState.DISABLED and not cpu_is_device:
            probe = None
        self.probe: MemoryProbe | None = probe
        self.decision: VramDecision | None = decision
        plan = PlanSettings()
        if probe is not None and decision is not None:
            reserve = reserve_bytes(probe.device, probe.total(), sys.platform, settings)
            inference = self.config.inference_bytes
            given = inference is not None or settings.min_inference_bytes is not None
            if inference is None:
                inference = minimum_inference_bytes(reserve, settings)
            state = VramState.NORMAL_VRAM if forced else decision.state
            # a figure at or below the reserve leaves nothing for activations: they are predicted
            fixed = given and inference > reserve
            plan = PlanSettings(
                vram_state=state, reserve_bytes=reserve, min_inference_bytes=inference, headroom_fixed=fixed
            )
        self.mover = TorchMover(
            interrupt=lambda: self.manager.check(),
            pin=settings.pinned_memory,
            pinned_cap=pinned_memory_cap(_ram_total(), sys.platform, settings),
            on_pinning=self._pinning_note,
        )
        self.manager = MemoryManager(
            probe.free if probe is not None else (lambda: 0),
            self.mover,
            settings=plan,
            device=target,
            events=self.events,
            interrupt=self.interrupt,
        )

    def _pinning_note(self, model: str, reason: str) -> None:
        """Streaming from pageable memory (pinning failed or is capped): the plot shows why."""
        self.events.emit("keep", model, 0, reason[0].upper() + reason[1:] + ".", details={"pinning": "off"})

    def _probe(self) -> tuple[MemoryProbe | None, str, bool]:
        """(probe, torch device to place on, whether the VRAM state is forced to normal); the
        probe's source is kept as ``self._source`` (what the window's plot samples)."""
        simulate = self.config.simulate_bytes
        if self.accelerator is not None:
            self._source = MemoryFigures(device=self.accelerator, limit_bytes=simulate)
            # the card itself, index included: "cuda" alone would be whichever card is current
            target, forced = self.accelerator.torch_device, False
        elif simulate > 0:
            cpu = cpu_device(_ram_total(), name="Simulated GPU")
            self._source = MemoryFigures(device=cpu, limit_bytes=simulate, charged=True)
            target, forced = "cpu", False
        elif self.cpu_is_device:  # RAM is the device: a card large enough for everything
            self._source = MemoryFigures(device=self.cpu or cpu_device(_ram_total()))
            target, forced = "cpu", True
        else:
            self._source, target, forced = MemoryFigures(), "cpu", False
        return monitor_probe(self._source, self.placed_bytes), target, forced

    @classmethod
    def discover(cls, config: PlacementConfig | None = None, **kwargs: object) -> Placement:
        accelerators = [d for d in discover_devices() if d.is_accelerator]
        return cls(accelerators[0] if accelerators else None, config, **kwargs)  # type: ignore[arg-type]

    def reconfigured(self, config: PlacementConfig) -> Placement:
        """The same device under new settings: everything placed here goes back to RAM first, and
        the new placement shares this one's event log and interrupt flag."""
        self.manager.unload_all("the memory settings changed")
        return Placement(
            self.accelerator or self.cpu,
            config,
            events=self.events,
            interrupt=self.interrupt,
            cpu_is_device=self.cpu_is_device,
        )

    # -- reading ----------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self.probe is not None

    @property
    def target(self) -> str | None:
        return self.manager.device if self.active else None

    @property
    def compute_bytes(self) -> int:
        """Bytes per activation element a diffusion model computes with here: the dtype policy's
        choice for the card (4 on Pascal and GTX 16-series, which compute in fp32); 2 on a card
        simulated on the CPU, which stands for a GPU computing in fp16."""
        if self.accelerator is None:
            return 2
        choice = DtypePolicy().storage_and_compute("diffusion_model", None, None, self.accelerator)
        return choice.compute.itemsize

    @property
    def headroom(self) -> int | None:
        return self.manager.settings.min_inference_bytes if self.active else None

    def describe(self) -> PlacementInfo:
        view = self.memory_figures()
        has_gpu = self.accelerator is not None
        if self.probe is None or self.decision is None:
            why = "no GPU was found" if self.accelerator is None else "the VRAM mode is set to no GPU"
            reason = f"Computed on the CPU: {why}."
            return PlacementInfo(
                False, "cpu", "CPU and system RAM", "disabled", reason, has_gpu=has_gpu, memory=view
            )
        dev = self.probe.device
        simulated = self.accelerator is None and self.config.simulate_bytes > 0
        label = (
            f"Simulated {_simulated_size(self.probe.total())} GPU (on the CPU)" if simulated else dev.label
        )
        return PlacementInfo(
            True, self.manager.device, label, self.decision.state.option, self.decision.reason,
            simulated, has_gpu, view,
        )  # fmt: skip

    # -- models -----------------------------------------------------------------------------------
    def register(self, model: object, name: str, family: str | None = None) -> ManagedModel:
        """Track ``model`` (a ``ModelPatcher``: its stack is applied on placement, or a module) of
        ``family`` (whose record says how much room its activations take)."""
        if isinstance(model, ModelPatcher):
            self.mover.use_patcher(model)
        self._profiles[id(model)] = network_profile(family, model)
        return self.manager.register(model, name)

    def profile(self, model: object) -> Profile:
        """The inference-memory profile ``model`` was registered with ((None, None): unknown)."""
        return self._profiles.get(id(model), (None, None))

    def place(self, models: Sequence[object], memory_required: int = 0) -> LoadResult:
        """Place ``models``, keeping room for ``memory_required`` bytes of activations (0: the
        measured model's figure for one image at each model's usual size)."""
        need = memory_required or default_memory_required(
            self.manager, [self.profile(m) for m in models], self.compute_bytes
        )
        factors = sum(self.mover.factor_bytes(m) for m in models)  # LoRA factors live on the device
        return self.manager.load_models(models, need + factors)

    def settle(self) -> None:
        """A run ended (done, failed or interrupted): copies started ahead for a next forward are
        freed, so nothing the plan does not count stays on the device."""
        self.mover.drop_prefetched()

    def offload(self, models: Sequence[object], why: str = "you offloaded it") -> LoadResult:
        return self.manager.unload_models(models, why)

    def refresh(self, model: object) -> int:
        """Bring a changed LoRA stack onto ``model``'s placed weights (0 when not placed)."""
        entry = self.manager.find(model)
        return self.mover.refresh(entry) if entry is not None else 0

    def is_placed(self, model: object) -> bool:
        e = self.manager.find(model)
        return e is not None and (bool(e.loaded_modules) or e.streaming)

    def placement_of(self, model: object) -> tuple[int, int]:
        """(bytes resident on the device, bytes that stream from RAM at each forward)."""
        e = self.manager.find(model)
        if e is None or not (e.loaded_modules or e.streaming):
            return 0, 0
        on_device = e.loaded_bytes
        return on_device, (e.total_bytes - on_device if e.streaming else 0)

    def release(self, model: object) -> None:
        """The session drops ``model``: off the device, originals back, streaming stopped, and the
        manager forgets it (its name is free for the next model; no "dropped" event follows)."""
        if self.is_placed(model):
            self.manager.unload_models([model], "its file was unloaded")
        self.mover.release(model)
        self.manager.forget(model)
        self._profiles.pop(id(model), None)

    def memory_figures(self) -> MemoryFigures:
        """The memory numbers now (call on the thread that owns the session)."""
        fixed = bool(self.manager.settings.headroom_fixed) and self.active
        return replace(
            self._source, placed_bytes=self.placed_bytes(), headroom=self.headroom, headroom_fixed=fixed
        )

    def placed_bytes(self) -> int:
        """What the manager has placed on the device (lock-free: the GUI thread reads it too)."""
        return sum(info.device_bytes for info in self.manager.loaded())
