"""Loadout's version, read once from the installed package's metadata (pyproject.toml's; the
frozen app carries it too)."""

from __future__ import annotations

from functools import cache
from importlib import metadata


@cache
def engine_version() -> str:
    """ "0.1.0"; "dev" when running from a source tree that was never installed."""
    try:
        return metadata.version("loadout")
    except metadata.PackageNotFoundError:
        return "dev"


#: Bump when what detection reports about a file changes (a new field, a new family): the library's
#: cache of inspect records is keyed by :func:`cache_version`, so every file is read once again.
#: 2: LoRAs' trained scale from ``lora_adapter_metadata``; PixArt LoRAs guessed.
DETECTION_REVISION = 2


def cache_version() -> str:
    """The engine version the library cache's records are valid for ("0.1.0+detect2")."""
    return f"{engine_version()}+detect{DETECTION_REVISION}"
