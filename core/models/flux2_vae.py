"""The FLUX.2 VAE: a KL autoencoder of SD's shape with 32 latent channels (quant convs kept), whose
latent space is the 2x2 patches of those 32 channels (128 channels at 1/16 of the picture's size),
normalised per channel by the batch-norm statistics stored in the file (``bn.running_mean``,
``bn.running_var``; eps 1e-4, no affine weights), as ComfyUI's and diffusers'
``AutoencoderKLFlux2`` pipelines do. The sampler works in that 128-channel space.

Patch channels are ordered (channel, row, column): channel ``4c + 2i + j`` is latent channel ``c``
at offset (i, j) of its 2x2 patch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from core.models.vae import TILE_LATENT, AutoencoderKL, VAEConfig
from core.ops.layers import OpSet, default_ops

PATCH = 2
BN_EPS = 1e-4


def patchify(z: torch.Tensor) -> torch.Tensor:
    """(B, C, 2h, 2w) -> (B, 4C, h, w)."""
    b, c, h, w = z.shape
    z = z.reshape(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 1, 3, 5, 2, 4)
    return z.reshape(b, c * PATCH * PATCH, h // PATCH, w // PATCH)


def unpatchify(z: torch.Tensor) -> torch.Tensor:
    """(B, 4C, h, w) -> (B, C, 2h, 2w)."""
    b, c4, h, w = z.shape
    c = c4 // (PATCH * PATCH)
    z = z.reshape(b, c, PATCH, PATCH, h, w).permute(0, 1, 4, 2, 5, 3)
    return z.reshape(b, c, h * PATCH, w * PATCH)


class LatentNorm(nn.Module):
    """The file's batch-norm statistics of the patched latent (buffers; never trained here)."""

    running_mean: torch.Tensor
    running_var: torch.Tensor

    def __init__(
        self, channels: int, *, device: torch.device | str | None, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(channels, device=device, dtype=dtype))
        self.register_buffer("running_var", torch.ones(channels, device=device, dtype=dtype))
        self.register_buffer("num_batches_tracked", torch.zeros((), device=device, dtype=torch.long))

    def _stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.running_mean.to(like.device, torch.float32).view(1, -1, 1, 1)
        std = torch.sqrt(self.running_var.to(like.device, torch.float32).view(1, -1, 1, 1) + BN_EPS)
        return mean, std

    def normalize(self, z: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(z)
        return ((z.float() - mean) / std).to(z.dtype)

    def denormalize(self, z: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(z)
        return (z.float() * std + mean).to(z.dtype)


class Flux2VAE(AutoencoderKL):
    """:class:`AutoencoderKL` (32 latent channels) with the patched, normalised latent space."""

    def __init__(
        self,
        config: VAEConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(config, ops=ops, device=device, dtype=dtype)
        self.bn = LatentNorm(config.latent_channels * PATCH * PATCH, device=device, dtype=dtype)

    @property
    def latent_downscale(self) -> int:
        return self.config.downscale * PATCH

    @property
    def latent_channels(self) -> int:
        return self.config.latent_channels * PATCH * PATCH

    def encode_latent(self, pixels: torch.Tensor) -> torch.Tensor:
        """Pixels (B, 3, H, W), sides multiples of 16 -> the normalised patched posterior mean."""
        mean = self.moments(pixels).chunk(2, dim=1)[0]
        return self.bn.normalize(patchify(mean))

    def to_vae_space(self, latent: torch.Tensor) -> torch.Tensor:
        """The 128-channel latent -> the autoencoder's own 32-channel latent at 1/8 size."""
        return unpatchify(self.bn.denormalize(latent))

    def decode_latent(self, latent: torch.Tensor) -> torch.Tensor:
        return self._decode_raw(self.to_vae_space(latent))

    def decode_latent_tiled(
        self, latent: torch.Tensor, progress: Callable[[int, int], None] | None = None
    ) -> torch.Tensor:
        return self.decode_tiled(self.to_vae_space(latent), TILE_LATENT, progress=progress, scaled=False)
