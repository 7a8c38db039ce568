"""The Wan 2.1 VAE package (Qwen-Image's and Anima's VAE too): the causal 3-D network run on single
frames (:mod:`.network`), its diffusers key map (:mod:`.keys`) and the codec (:mod:`.codec`)."""

from core.archs.wan_vae.codec import CODEC

__all__ = ["CODEC"]
