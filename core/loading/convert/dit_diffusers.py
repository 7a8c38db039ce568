"""diffusers -> original key layout for the DiT transformers: each map lives in its architecture's
package (``core/archs/<arch>/keys.py``: ``sd3_key_map``, ``flux_diffusers_to_original`` ...), the
row type and the converters in :mod:`core.archs.keymaps`. This module keeps the import path older
callers use: any other name is looked up in the packages' ``keys`` modules."""

from typing import Any

from core.archs.catalog import find_in_packages
from core.archs.keymaps import KeyMapping, convert_shapes, convert_state_dict

__all__ = ["KeyMapping", "convert_shapes", "convert_state_dict"]


def __getattr__(name: str) -> Any:
    return find_in_packages("keys", name)
