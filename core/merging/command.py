"""``loadout merge A B [C]``'s composition: where the merge computes (the named device through a
:class:`~core.session.placement.Placement`, or a card of ``vram_limit`` bytes simulated on it) and
the merge itself, with its memory events."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from core.memory.devices import device_named
from core.memory.events import MemoryEvent
from core.memory.policy import MemorySettings
from core.merging.merge import MergeResult, merge_models
from core.merging.recipe import MergeRecipe
from core.session.placement import Placement, PlacementConfig


@dataclass(frozen=True)
class MergeRun:
    result: MergeResult
    events: tuple[MemoryEvent, ...]


def placement_for(
    device: str, vram_limit: int | None, interrupt: threading.Event | None = None
) -> Placement | None:
    """The placement a merge on ``device`` computes through; None for the CPU without a limit
    (plain slices in RAM)."""
    info = device_named(device)
    if info.kind == "cpu" and not vram_limit:
        return None
    config = PlacementConfig(MemorySettings(), simulate_bytes=vram_limit or 0)
    return Placement(info, config, interrupt=interrupt)


def run_merge(
    paths: Sequence[str | os.PathLike[str]],
    recipe: MergeRecipe,
    out: str | os.PathLike[str],
    *,
    dtype: torch.dtype | None = None,
    device: str = "cpu",
    vram_limit: int | None = None,
    interrupt: threading.Event | None = None,
    check: Callable[[], None] | None = None,
) -> MergeRun:
    placement = placement_for(device, vram_limit, interrupt)
    manager = placement.manager if placement is not None and placement.active else None
    result = merge_models(paths, recipe, out, dtype=dtype, manager=manager, check=check)
    return MergeRun(result, placement.events.events() if placement is not None else ())
