"""The UNet's diffusers key map lives in its package (:mod:`core.archs.unet.keys`); this module
keeps the names its callers import."""

from core.archs.unet.keys import unet_diffusers_to_original, unet_original_key_map

__all__ = ["unet_diffusers_to_original", "unet_original_key_map"]
