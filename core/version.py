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
