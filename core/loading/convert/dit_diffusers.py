"""diffusers -> original key layout for the SD3 MMDiT, Flux, Chroma and PixArt transformers: each
map now lives in its architecture's package (``core/archs/<arch>/keys.py``), the row type and the
converters in :mod:`core.archs.keymaps`; this module keeps the names its callers import."""

from core.archs.chroma.keys import chroma_diffusers_to_original, chroma_key_map
from core.archs.flux.keys import flux_diffusers_to_original, flux_key_map
from core.archs.keymaps import KeyMapping, convert_shapes, convert_state_dict
from core.archs.mmdit.keys import sd3_diffusers_to_original, sd3_key_map
from core.archs.pixart.keys import pixart_diffusers_to_original, pixart_key_map

__all__ = [
    "KeyMapping",
    "chroma_diffusers_to_original",
    "chroma_key_map",
    "convert_shapes",
    "convert_state_dict",
    "flux_diffusers_to_original",
    "flux_key_map",
    "pixart_diffusers_to_original",
    "pixart_key_map",
    "sd3_diffusers_to_original",
    "sd3_key_map",
]
