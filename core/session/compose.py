"""The composition root of the headless commands (``loadout run``, ``loadout generate``): one
device, one :class:`Placement` (probe + manager + mover) and one :class:`Session` over it, built in
one place. The window builds its own through the backend (a GPU or a simulated card from Settings).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from core.detect.types import Detection
from core.loading.loader import LoadedComponent, inspect_for_loading
from core.memory.devices import DeviceInfo, device_named
from core.memory.policy import MemorySettings
from core.session.placement import Placement, PlacementConfig
from core.session.session import Session
from core.session.slots import LoadedModel


def headless_session(
    device: str,
    *,
    settings: MemorySettings | None = None,
    vram_limit: int | None = None,
    interrupt: threading.Event | None = None,
    naming: Callable[[LoadedModel, LoadedComponent], str] | None = None,
) -> tuple[Session, DeviceInfo]:
    """A session placing on the named ``device`` (RAM is the device on the CPU; ``vram_limit``
    simulates a card of that size), and the device it found."""
    info = device_named(device)
    config = PlacementConfig(settings or MemorySettings(), simulate_bytes=vram_limit or 0)
    placement = Placement(info, config, interrupt=interrupt, cpu_is_device=True)
    return Session(placement, naming=naming), info


def headless_placement(
    device: str, vram_limit: int | None, interrupt: threading.Event | None = None
) -> Placement | None:
    """A placement on the named ``device`` for work that is not a model in a slot (a merge computes
    through its manager): a card of ``vram_limit`` bytes simulated there, or the real card; None for
    the CPU without a limit (plain RAM)."""
    info = device_named(device)
    if info.kind == "cpu" and not vram_limit:
        return None
    placement = Placement(
        info, PlacementConfig(MemorySettings(), simulate_bytes=vram_limit or 0), interrupt=interrupt
    )
    return placement if placement.active else None


def load_main(session: Session, path: Path, check: Callable[[], None]) -> Detection:
    """Load a checkpoint or a diffusion model into the main slot with one header read."""
    index, det = inspect_for_loading(path)
    kind = "checkpoint" if det.kind == "checkpoint" else "diffusion_model"
    session.load(path, kind, lambda p: None, check, inspected=(index, det))
    return det
