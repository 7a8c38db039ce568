"""The application's family registry, built explicitly from the family tables.

``core.detect.registry`` defines what a family record is; the tables live in
``diffusion_families`` and ``encoder_families``; this module puts them together once. Nothing is
registered as a side effect of importing a table: code that needs the families imports
:data:`REGISTRY` from here (tests build their own :class:`Registry` from the same functions).
"""

from __future__ import annotations

from core.detect.diffusion_families import register_diffusion_families
from core.detect.encoder_families import register as register_encoder_families
from core.detect.registry import Registry


def build_registry() -> Registry:
    """Every family Loadout knows: diffusion models, then text encoders, VAEs and upscalers."""
    registry = Registry()
    register_diffusion_families(registry)
    register_encoder_families(registry)
    return registry


#: The one registry of the application (never changed after it is built).
REGISTRY = build_registry()


def lora_fits(lora_family: str | None, model_family: str) -> bool:
    """Whether a LoRA made for ``lora_family`` fits a model of ``model_family``: the same family, or
    two whose records share a ``lora_group`` (same shapes where a LoRA touches them: SDXL LoRAs on
    SSD-1B or Vega, Flux LoRAs on every Flux and Chroma; Pony and Illustrious *are* SDXL). An
    unknown base (None) is never ruled out."""
    if lora_family is None or lora_family == model_family:
        return True
    a, b = REGISTRY.get(lora_family), REGISTRY.get(model_family)
    return a is not None and b is not None and a.lora_group != "" and a.lora_group == b.lora_group
