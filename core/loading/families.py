"""What loading and saving read from a family's record: the UNet preset its diffusers layout
converts with and its ModelSpec architecture id (data on ``Family``; the latent format is read by
``core.models.vae.latent_format_for``)."""

from __future__ import annotations

from core.detect.catalog import REGISTRY
from core.detect.registry import Family


def family(family_id: str) -> Family | None:
    return REGISTRY.get(family_id)


def network_families(network: str) -> tuple[str, ...]:
    """Families whose record names ``network`` as their calling convention, in registry order."""
    return tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == network)


def network_preset(family_id: str) -> str:
    """The DiT config preset (an ``MMDiTConfig``/``FluxConfig`` constructor name) of a family."""
    fam = REGISTRY.get(family_id)
    assert fam is not None and fam.network_preset, f"{family_id} has no network preset"
    return fam.network_preset


def unet_families() -> tuple[str, ...]:
    """Families built as the SD-family UNet (they carry a UNet preset)."""
    return tuple(f.id for f in REGISTRY if f.unet_preset)


def modelspec_architecture(family_id: str | None) -> str | None:
    fam = REGISTRY.get(family_id) if family_id else None
    return fam.modelspec or None if fam is not None else None
