"""Memory sampling for the live plot: system RAM, this process's RSS and, with a GPU, its memory.

Qt-free: the plot panel calls :meth:`MemoryMonitor.sample` on a timer (5-10 Hz) in the GUI thread;
each reading is a few microseconds (psutil, and torch / NVML through core's probes when a GPU is
there). History is a bounded ring; peaks are kept since start (or the last :meth:`reset_peaks`).

The monitor's probe is its own, built on the GUI thread from the placement's plain
:class:`~core.session.placement.MemoryFigures` (:meth:`MemoryMonitor.watch`); the bytes Loadout
holds on the device come with the fresh figures the backend sends after each memory decision.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from core.memory.devices import DeviceInfo, discover_devices
from core.memory.probes import MemoryProbe, probe_for
from core.session.placement import MemoryFigures, monitor_probe


@dataclass(frozen=True)
class MemorySample:
    time: float
    ram_used: int
    ram_total: int
    rss: int
    gpu_used: int | None = None  # whole device (NVML)
    gpu_total: int | None = None
    gpu_reserved: int | None = None  # this process's caching allocator
    gpu_allocated: int | None = None  # this process's live tensors


class MemoryMonitor:
    """Samples memory; ``gpu`` is the accelerator's probe, None without one."""

    def __init__(
        self,
        gpu: MemoryProbe | None = None,
        *,
        history_seconds: float = 300.0,
        rate_hz: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gpu = gpu
        self.clock = clock
        self.start = clock()
        self.rate_hz = rate_hz
        self.history: deque[MemorySample] = deque(maxlen=int(history_seconds * rate_hz))
        self._process = psutil.Process()
        self.peak_rss = 0
        self.peak_ram = 0
        self.peak_gpu: int | None = None
        #: bytes Loadout itself holds on the device, which the memory manager would evict to make
        #: room (from the latest figures the backend sent)
        self.reclaimable = 0
        #: the placement figures this monitor samples the device of (None: a probe given to it)
        self.figures: MemoryFigures | None = None

    @classmethod
    def watching(cls, figures: MemoryFigures, **kwargs: object) -> MemoryMonitor:
        """A monitor of the placement's device, described by ``figures``."""
        monitor = cls(None, **kwargs)  # type: ignore[arg-type]
        monitor.watch(figures)
        return monitor

    def watch(self, figures: MemoryFigures) -> None:
        """Sample the device ``figures`` describe, with a probe of this thread's own (a simulated
        card on the CPU counts the placed bytes of the latest figures as its use)."""
        self.figures = figures
        self.reclaimable = figures.placed_bytes
        self.gpu = monitor_probe(figures, lambda: self.reclaimable)

    def update(self, figures: MemoryFigures) -> None:
        """Fresh numbers from the backend (after a memory decision): what Loadout holds now."""
        self.reclaimable = figures.placed_bytes

    @classmethod
    def discover(cls, **kwargs: object) -> MemoryMonitor:
        """A monitor on the first accelerator found (none on a CPU-only machine)."""
        accelerators = [d for d in discover_devices() if d.is_accelerator]
        probe = probe_for(accelerators[0]) if accelerators else None
        return cls(probe, **kwargs)  # type: ignore[arg-type]

    @property
    def device(self) -> DeviceInfo | None:
        return self.gpu.device if self.gpu is not None else None

    @property
    def has_gpu(self) -> bool:
        return self.gpu is not None

    def sample(self) -> MemorySample:
        vm = psutil.virtual_memory()
        s = MemorySample(
            self.clock() - self.start,
            int(vm.total - vm.available),
            int(vm.total),
            int(self._process.memory_info().rss),
        )
        if self.gpu is not None:
            with contextlib.suppress(Exception):  # a driver hiccup must not stop the plot
                s = MemorySample(
                    s.time, s.ram_used, s.ram_total, s.rss,
                    self.gpu.device_used(), self.gpu.total(), self.gpu.reserved(), self.gpu.allocated(),
                )  # fmt: skip
        self.history.append(s)
        self.peak_rss = max(self.peak_rss, s.rss)
        self.peak_ram = max(self.peak_ram, s.ram_used)
        if s.gpu_used is not None:
            self.peak_gpu = max(self.peak_gpu or 0, s.gpu_used)
        return s

    def now(self) -> float:
        """Seconds since the monitor started (the plot's time axis)."""
        return self.clock() - self.start

    def reset_peaks(self) -> None:
        self.peak_rss = self.peak_ram = 0
        self.peak_gpu = None if self.gpu is None else 0

    def free_bytes(self) -> tuple[int, str]:
        """(free bytes, where) for a fit estimate: the GPU's free memory plus what Loadout's own
        models hold there (they would be evicted), else available RAM."""
        if self.gpu is not None:
            try:
                return self.gpu.free() + self.reclaimable, self.gpu.device.name
            except Exception:
                pass
        return int(psutil.virtual_memory().available), "system RAM"
