"""The adapter classes Loadout knows, registered explicitly in one place (no module registers
itself on import). The order is the order ``parse`` asks them to claim a module's factors."""

from __future__ import annotations

from core.patching.adapters.base import AdapterRegistry
from core.patching.adapters.full import DiffAdapter, SetWeightAdapter
from core.patching.adapters.glora import GLoRAAdapter
from core.patching.adapters.loha import LoHaAdapter
from core.patching.adapters.lokr import LoKrAdapter
from core.patching.adapters.lora import LoConAdapter, LoRAAdapter
from core.patching.adapters.oft import BOFTAdapter, OFTAdapter

ADAPTER_CLASSES = (
    DiffAdapter, SetWeightAdapter, GLoRAAdapter, LoHaAdapter, LoKrAdapter, LoRAAdapter, LoConAdapter,
    OFTAdapter, BOFTAdapter,
)  # fmt: skip


def build_registry() -> AdapterRegistry:
    registry = AdapterRegistry()
    for cls in ADAPTER_CLASSES:
        registry.register(cls)
    return registry


#: The one adapter registry of the application (never changed after it is built).
registry = build_registry()
