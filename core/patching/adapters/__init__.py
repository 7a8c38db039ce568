"""Weight adapters: LoRA/LoCon, LoHa, LoKr (each optionally DoRA), GLoRA, OFT, BOFT, diff, set.

Each adapter is a small frozen class holding one module's factors; its weight math is pure (see
``base.Adapter``). ``catalog`` registers every class in ``registry``, explicitly.
"""

from core.patching.adapters.base import (
    Adapter,
    AdapterRegistry,
    DoraAxis,
    LowRankAdapter,
)
from core.patching.adapters.catalog import registry
from core.patching.adapters.dora import dora_difference, dora_weight
from core.patching.adapters.errors import AdapterFormatError, NonFiniteAdapterError
from core.patching.adapters.full import DiffAdapter, SetWeightAdapter
from core.patching.adapters.glora import GLoRAAdapter
from core.patching.adapters.loha import LoHaAdapter
from core.patching.adapters.lokr import LoKrAdapter
from core.patching.adapters.lora import LoConAdapter, LoRAAdapter
from core.patching.adapters.oft import BOFTAdapter, OFTAdapter
from core.patching.adapters.parse import (
    ModuleAdapters,
    adapter_from_factors,
    bias_adapter_from_factors,
    canonical_part,
    module_adapters,
)
from core.patching.adapters.slices import Offset, Patch, apply_patches, apply_to_slice

__all__ = [
    "Adapter",
    "AdapterFormatError",
    "AdapterRegistry",
    "BOFTAdapter",
    "DiffAdapter",
    "DoraAxis",
    "GLoRAAdapter",
    "LoConAdapter",
    "LoHaAdapter",
    "LoKrAdapter",
    "LoRAAdapter",
    "LowRankAdapter",
    "ModuleAdapters",
    "NonFiniteAdapterError",
    "OFTAdapter",
    "Offset",
    "Patch",
    "SetWeightAdapter",
    "adapter_from_factors",
    "apply_patches",
    "apply_to_slice",
    "bias_adapter_from_factors",
    "canonical_part",
    "dora_difference",
    "dora_weight",
    "module_adapters",
    "registry",
]
