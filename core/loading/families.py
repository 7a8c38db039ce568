"""What loading and saving read from a family's record: the UNet preset its diffusers layout
converts with and its ModelSpec architecture id (data on ``Family``; the latent format is read by
``core.models.vae.latent_format_for``)."""

from __future__ import annotations

from core.detect.catalog import REGISTRY
from core.detect.registry import Family


def family(family_id: str) -> Family | None:
    return REGISTRY.get(family_id)


def unet_families() -> tuple[str, ...]:
    """Families built as the SD-family UNet (they carry a UNet preset)."""
    return tuple(f.id for f in REGISTRY if f.unet_preset)


def modelspec_architecture(family_id: str | None) -> str | None:
    fam = REGISTRY.get(family_id) if family_id else None
    return fam.modelspec or None if fam is not None else None
