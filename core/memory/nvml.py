"""NVML for one GPU: the memory in use on the whole device, as nvidia-smi counts it.

Used by :class:`core.memory.probes.TorchCudaProbe` for ``device_used`` (the memory plot's GPU
line); optional: without nvidia-ml-py or a driver library the probe falls back to torch.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)


class Nvml:
    """A lazily opened NVML handle for one GPU; unavailable (and silent) without nvidia-ml-py/driver."""

    def __init__(self, props: Any) -> None:
        self._props = props
        self._lib: ModuleType | None = None
        self._handle: Any = None
        self._failed = False
        self._v2: bool | None = None  # whether the driver answers NVML's v2 memory info (None: not asked)

    def used(self) -> int | None:
        if self._failed:
            return None
        try:
            if self._handle is None:
                self._open()
            assert self._lib is not None
            return self._used(self._lib)
        except Exception as exc:  # no package, no driver library, MIG, WSL quirks: fall back
            log.debug("NVML unavailable: %s", exc)
            self._failed = True
            return None

    def _used(self, lib: ModuleType) -> int:
        """Bytes in use as nvidia-smi counts them: NVML's v2 memory info, which leaves out what the
        driver reserves for itself (v1's ``used`` is total - free, the reservation included: 614
        MiB more than nvidia-smi on an H200 with driver 580). v1 where the driver has no v2."""
        version = getattr(lib, "nvmlMemory_v2", None)
        if version is not None and self._v2 is not False:
            try:
                used = int(lib.nvmlDeviceGetMemoryInfo(self._handle, version=version).used)
            except Exception as exc:  # an older driver: NVML_ERROR_FUNCTION_NOT_FOUND / argument
                log.debug("NVML memory info v2 unavailable, using v1: %s", exc)
                self._v2 = False
            else:
                self._v2 = True
                return used
        return int(lib.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _open(self) -> None:
        lib = importlib.import_module("pynvml")
        lib.nvmlInit()
        self._lib = lib
        uuid = getattr(self._props, "uuid", None)
        if uuid is not None:
            text = str(uuid)
            try:
                self._handle = lib.nvmlDeviceGetHandleByUUID(
                    text if text.startswith("GPU-") else f"GPU-{text}"
                )
                return
            except Exception:
                pass
        bus = "{:08X}:{:02X}:{:02X}.0".format(
            int(getattr(self._props, "pci_domain_id", 0)),
            int(self._props.pci_bus_id),
            int(self._props.pci_device_id),
        )
        self._handle = lib.nvmlDeviceGetHandleByPciBusId(bus)
