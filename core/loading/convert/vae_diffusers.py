"""The KL-VAE's diffusers key map lives in its package (:mod:`core.archs.kl_vae.keys`); this module
keeps the names its callers import."""

from core.archs.kl_vae.keys import vae_diffusers_to_original, vae_original_key_map

__all__ = ["vae_diffusers_to_original", "vae_original_key_map"]
