"""Memory probes: how much memory a device has, how much is free, how much this process holds.

Every reading the memory manager takes goes through a :class:`MemoryProbe`, so policy and planning
run unchanged on a simulated card (:class:`FakeProbe`) or on a real card capped to a smaller size
(:class:`LimitedProbe`, ``loadout run --vram-limit``). Probes touch hardware only when called.

"Free" follows the allocator-aware rule: what the driver reports free plus what PyTorch's caching
allocator holds reserved but does not use (it hands that out again without asking the driver).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

import psutil
import torch

from core.memory.devices import DeviceInfo, nvidia_device
from core.memory.nvml import Nvml

log = logging.getLogger(__name__)


@runtime_checkable
class MemoryProbe(Protocol):
    """Readings for one device, in bytes. Each call reads the current value."""

    @property
    def device(self) -> DeviceInfo: ...

    def total(self) -> int:
        """Memory the device has."""
        ...

    def free(self) -> int:
        """Memory a new allocation can still get: driver free + allocator reserved-but-unused."""
        ...

    def reserved(self) -> int:
        """Memory PyTorch's caching allocator holds from the driver (used or cached)."""
        ...

    def allocated(self) -> int:
        """Memory held by live tensors of this process."""
        ...

    def device_used(self) -> int:
        """Memory in use on the whole device, by every process (NVML where available)."""
        ...


# --- real devices ------------------------------------------------------------------------------


class TorchCudaProbe:
    """A CUDA device (NVIDIA, or AMD on a ROCm build) read through torch.cuda, NVML for device_used."""

    def __init__(self, device: DeviceInfo, *, use_nvml: bool = True) -> None:
        if device.kind not in ("cuda", "rocm"):
            raise ValueError(f"TorchCudaProbe needs a CUDA or ROCm device, got {device.kind}")
        self._device = device
        self._dev = torch.device("cuda", device.index)
        self._nvml: Nvml | None = None
        if use_nvml and device.kind == "cuda":
            self._nvml = Nvml(torch.cuda.get_device_properties(self._dev))

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def _stats(self) -> tuple[int, int]:
        stats = torch.cuda.memory_stats(self._dev)
        return int(stats.get("reserved_bytes.all.current", 0)), int(stats.get("active_bytes.all.current", 0))

    def total(self) -> int:
        return int(torch.cuda.mem_get_info(self._dev)[1])

    def free(self) -> int:
        driver_free = int(torch.cuda.mem_get_info(self._dev)[0])
        reserved, active = self._stats()
        return driver_free + max(0, reserved - active)

    def reserved(self) -> int:
        return int(torch.cuda.memory_reserved(self._dev))

    def allocated(self) -> int:
        return int(torch.cuda.memory_allocated(self._dev))

    def device_used(self) -> int:
        if self._nvml is not None:
            used = self._nvml.used()
            if used is not None:
                return used
        driver_free, total = torch.cuda.mem_get_info(self._dev)
        return int(total) - int(driver_free)


class XpuProbe:
    """An Intel GPU read through torch.xpu."""

    def __init__(self, device: DeviceInfo) -> None:
        if device.kind != "xpu":
            raise ValueError(f"XpuProbe needs an XPU device, got {device.kind}")
        self._device = device
        self._dev = torch.device("xpu", device.index)
        self._xpu: Any = torch.xpu

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def _driver(self) -> tuple[int, int]:
        mem_get_info = getattr(self._xpu, "mem_get_info", None)
        if mem_get_info is not None:
            free, total = mem_get_info(self._dev)
            return int(free), int(total)
        total = self._device.total_bytes  # older torch.xpu: only this process's usage is known
        return max(0, total - self.reserved()), total

    def total(self) -> int:
        return self._driver()[1]

    def free(self) -> int:
        stats = self._xpu.memory_stats(self._dev)
        unused = int(stats.get("reserved_bytes.all.current", 0)) - int(
            stats.get("active_bytes.all.current", 0)
        )
        return self._driver()[0] + max(0, unused)

    def reserved(self) -> int:
        return int(self._xpu.memory_reserved(self._dev))

    def allocated(self) -> int:
        return int(self._xpu.memory_allocated(self._dev))

    def device_used(self) -> int:
        free, total = self._driver()
        return total - free


class MpsProbe:
    """Apple silicon: the GPU's budget is Metal's working set, carved out of shared system RAM."""

    def __init__(self, device: DeviceInfo) -> None:
        if device.kind != "mps":
            raise ValueError(f"MpsProbe needs the MPS device, got {device.kind}")
        self._device = device

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def total(self) -> int:
        return self._device.total_bytes

    def free(self) -> int:
        driver = self.reserved()
        current = self.allocated()
        by_budget = self.total() - current
        by_ram = int(psutil.virtual_memory().available) + max(0, driver - current)
        return max(0, min(by_budget, by_ram))

    def reserved(self) -> int:
        return int(torch.mps.driver_allocated_memory())

    def allocated(self) -> int:
        return int(torch.mps.current_allocated_memory())

    def device_used(self) -> int:
        vm = psutil.virtual_memory()  # shared memory: the device's usage is the system's
        return int(vm.total - vm.available)


class CpuProbe:
    """System RAM. There is no allocator to ask on the CPU: reserved and allocated read 0, and the
    memory manager accounts for what it places (see ``LimitedProbe(charge=...)``)."""

    def __init__(self, device: DeviceInfo) -> None:
        if device.kind != "cpu":
            raise ValueError(f"CpuProbe needs the CPU device, got {device.kind}")
        self._device = device

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def total(self) -> int:
        return int(psutil.virtual_memory().total)

    def free(self) -> int:
        return int(psutil.virtual_memory().available)

    def reserved(self) -> int:
        return 0

    def allocated(self) -> int:
        return 0

    def device_used(self) -> int:
        vm = psutil.virtual_memory()
        return int(vm.total - vm.available)


def probe_for(device: DeviceInfo, *, use_nvml: bool = True) -> MemoryProbe:
    """The real probe for a discovered device."""
    if device.kind in ("cuda", "rocm"):
        return TorchCudaProbe(device, use_nvml=use_nvml)
    if device.kind == "xpu":
        return XpuProbe(device)
    if device.kind == "mps":
        return MpsProbe(device)
    return CpuProbe(device)


# --- simulated devices -------------------------------------------------------------------------


class SimulatedOutOfMemory(torch.OutOfMemoryError):
    """Raised by :meth:`FakeProbe.allocate` where a real card would run out of memory."""


class FakeProbe:
    """A simulated card with a caching allocator, for tests and planning on any machine.

    ``FakeProbe(total=8 * GIB)`` is an 8 GiB Ampere card; ``used`` is what other processes hold
    from the start (the desktop, another app). :meth:`allocate` and :meth:`release` move this
    process's tensors; released memory stays reserved (cached) until :meth:`empty_cache`, as in
    PyTorch. :meth:`set_external` simulates other processes' usage changing.
    """

    def __init__(
        self,
        total: int,
        *,
        name: str = "Simulated GPU",
        capability: tuple[int, int] = (8, 6),
        used: int = 0,
        device: DeviceInfo | None = None,
    ) -> None:
        if total <= 0:
            raise ValueError(f"a simulated card needs a positive size, got {total} bytes")
        if not 0 <= used <= total:
            raise ValueError(f"external usage {used} must lie between 0 and the card's {total} bytes")
        if device is None:
            device = nvidia_device(0, name, total, capability, simulated=True)
        self._device = replace(device, total_bytes=total, simulated=True)
        self._total = total
        self._external = used
        self._reserved = 0
        self._allocated = 0

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def total(self) -> int:
        return self._total

    def driver_free(self) -> int:
        return max(0, self._total - self._reserved - self._external)

    def free(self) -> int:
        return self.driver_free() + (self._reserved - self._allocated)

    def reserved(self) -> int:
        return self._reserved

    def allocated(self) -> int:
        return self._allocated

    def device_used(self) -> int:
        return min(self._total, self._reserved + self._external)

    def allocate(self, nbytes: int) -> None:
        """Take ``nbytes`` for tensors: from the cache first, then from the driver; OOM if neither."""
        if nbytes < 0:
            raise ValueError("cannot allocate a negative number of bytes")
        cached = self._reserved - self._allocated
        from_driver = max(0, nbytes - cached)
        if from_driver > self.driver_free():
            raise SimulatedOutOfMemory(
                f"simulated out of memory: tried to allocate {nbytes} bytes with {self.free()} free "
                f"on a {self._total}-byte card"
            )
        self._reserved += from_driver
        self._allocated += nbytes

    def release(self, nbytes: int) -> None:
        """Free tensors; the memory stays reserved by the allocator (like PyTorch's cache)."""
        if not 0 <= nbytes <= self._allocated:
            raise ValueError(f"cannot release {nbytes} bytes: {self._allocated} are allocated")
        self._allocated -= nbytes

    def empty_cache(self) -> None:
        """Give cached (reserved but unused) memory back to the driver."""
        self._reserved = self._allocated

    def set_external(self, nbytes: int) -> None:
        """Other processes now hold ``nbytes`` (may exceed what is left: real drivers oversubscribe)."""
        if nbytes < 0:
            raise ValueError("external usage cannot be negative")
        self._external = nbytes


class LimitedProbe:
    """A real (or fake) probe capped to ``limit_bytes``: a smaller card simulated on a bigger one.

    What counts against the limit is ``charge()``: by default the inner device's allocated bytes;
    on the CPU, where no allocator reports, the memory manager passes the bytes it has placed.
    Free memory is the smaller of what the limit leaves and what the real device has free.
    """

    def __init__(
        self, inner: MemoryProbe, limit_bytes: int, *, charge: Callable[[], int] | None = None
    ) -> None:
        if limit_bytes <= 0:
            raise ValueError(f"a VRAM limit must be positive, got {limit_bytes} bytes")
        self._inner = inner
        self._limit = limit_bytes
        self._charge = charge if charge is not None else inner.allocated
        self._device = inner.device.limited_to(limit_bytes)

    @property
    def inner(self) -> MemoryProbe:
        return self._inner

    @property
    def limit_bytes(self) -> int:
        return self._limit

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def total(self) -> int:
        return min(self._inner.total(), self._limit)

    def free(self) -> int:
        left_in_limit = self.total() - self._charge()
        return max(0, min(self._inner.free(), left_in_limit))

    def reserved(self) -> int:
        return min(self._inner.reserved(), self._limit)

    def allocated(self) -> int:
        return min(self._inner.allocated(), self._limit)

    def device_used(self) -> int:
        """What the simulated card would show as used: its size minus what is free on it."""
        return self.total() - self.free()
