"""The KL-VAE package: the codec (:mod:`.codec`) and its diffusers key map (:mod:`.keys`); the
network itself is :class:`core.models.vae.AutoencoderKL`."""

from core.archs.kl_vae.codec import CODEC

__all__ = ["CODEC"]
