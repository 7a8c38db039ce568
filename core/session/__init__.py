"""One engine session: loaded models in typed slots, their LoRA stack, placement through the
memory manager, the test run. Qt-free; the window, ``loadout run`` and generation use it."""

from core.session.placement import MemoryFigures, Placement, PlacementConfig, PlacementInfo
from core.session.session import Session
from core.session.slots import LoadedModel, Loaders, SlotId
from core.session.snapshots import (
    ComponentInfo,
    LoraInfo,
    ModelInfo,
    RunReport,
    SessionEvent,
    StackInfo,
)

__all__ = [
    "ComponentInfo",
    "LoadedModel",
    "Loaders",
    "LoraInfo",
    "MemoryFigures",
    "ModelInfo",
    "Placement",
    "PlacementConfig",
    "PlacementInfo",
    "RunReport",
    "Session",
    "SessionEvent",
    "SlotId",
    "StackInfo",
]
