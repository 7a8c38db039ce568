"""The FLUX.2 VAE (``flux2-vae.safetensors``, diffusers' ``AutoencoderKLFlux2``) as a
:class:`~core.archs.protocols.LatentCodec`: its latent space is the batch-norm-normalised 2x2
patches of the 32-channel KL latent (128 channels, 16 pixels per latent), the space ComfyUI's
``Flux2`` latent format and ``EmptyFlux2LatentImage`` work in (the format itself scales nothing)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import cast

import torch
from torch import Tensor, nn

from core.archs.kl_vae.codec import decode_bytes
from core.archs.kl_vae.keys import vae_diffusers_to_original
from core.archs.layouts import Architecture, Shapes, Tensors
from core.archs.preview import LatentPreview, fit_linear_preview
from core.archs.protocols import TileProgress
from core.models.flux2_vae import Flux2VAE
from core.models.vae import TILE_LATENT, VAEConfig

#: the file's batch-norm keys (the statistics of the patched latent), beside the autoencoder's
BN_KEYS = ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked")


def _count(keys: Mapping[str, object], prefix: str) -> int:
    found = {int(m.group(1)) for k in keys if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))}
    return max(found) + 1 if found else 0


def diffusers_config(tensors: Mapping[str, Tensor]) -> VAEConfig:
    """The autoencoder's config read from diffusers-layout shapes."""
    base = int(tensors["encoder.conv_in.weight"].shape[0])
    levels = _count(tensors, "encoder.down_blocks.")
    widths = [int(tensors[f"encoder.down_blocks.{i}.resnets.0.conv1.weight"].shape[0]) for i in range(levels)]
    return VAEConfig(
        latent_channels=int(tensors["decoder.conv_in.weight"].shape[1]),
        base_channels=base,
        channel_mult=tuple(w // base for w in widths),
        num_res_blocks=_count(tensors, "encoder.down_blocks.0.resnets."),
        use_quant_conv="quant_conv.weight" in tensors,
        scaling_factor=1.0,
        norm_groups=min(32, base),
    )


def from_diffusers(t: Tensors, family: str) -> Tensors:
    """A diffusers-layout FLUX.2 VAE (``AutoencoderKLFlux2``) in the module's keys (the batch-norm
    statistics as they are)."""
    vae = {k: v for k, v in t.items() if k not in BN_KEYS}
    out = vae_diffusers_to_original(vae, diffusers_config(vae))
    out.update({k: t[k] for k in BN_KEYS if k in t})
    return out


def _config(shapes: Shapes, family: str) -> VAEConfig:
    base = int(shapes["encoder.conv_in.weight"][0]) if "encoder.conv_in.weight" in shapes else 128
    return VAEConfig.from_shapes(shapes, norm_groups=min(32, base))


ARCHITECTURE = Architecture(
    "flux2-vae",
    "vae",
    ("vae-flux2",),
    configure=_config,
    build=lambda cfg, device, dtype: Flux2VAE(cfg, device=device, dtype=dtype),
    to_module={"diffusers": from_diffusers},
    optional=frozenset({"bn.num_batches_tracked"}),
)


def _vae(module: nn.Module) -> Flux2VAE:
    return cast(Flux2VAE, module)


class Flux2Codec:
    """Pixels <-> FLUX.2 latents through a :class:`~core.models.flux2_vae.Flux2VAE` (the posterior
    mean on encode, as ComfyUI's VAEEncode; tiles of the 32-channel latent when tiled)."""

    id = "flux2-vae"
    architecture = ARCHITECTURE

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, Flux2VAE)

    def downscale(self, module: nn.Module) -> int:
        return _vae(module).latent_downscale

    def channels(self, module: nn.Module) -> int:
        return _vae(module).latent_channels

    def encode(self, module: nn.Module, pixels: Tensor) -> Tensor:
        return _vae(module).encode_latent(pixels)

    def decode(self, module: nn.Module, latent: Tensor) -> Tensor:
        return _vae(module).decode_latent(latent)

    def decode_tiled(self, module: nn.Module, latent: Tensor, progress: TileProgress | None = None) -> Tensor:
        return _vae(module).decode_latent_tiled(latent, progress)

    def decode_bytes(self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype) -> int:
        return decode_bytes(_vae(module), batch, height, width, dtype)

    def tiled_decode_bytes(
        self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype
    ) -> int:
        side = TILE_LATENT * _vae(module).config.downscale
        return decode_bytes(_vae(module), batch, min(height, side), min(width, side), dtype)

    def preview(self, module: nn.Module) -> LatentPreview:
        """The latent -> RGB map fitted to this VAE's decodes of smooth 128-channel latents."""
        vae = _vae(module)
        param = next(vae.parameters(), None)
        device = param.device if param is not None and param.device.type != "meta" else torch.device("cpu")

        def decode(z: Tensor) -> Tensor:
            with torch.inference_mode():
                return vae.decode_latent(z.to(device)).to("cpu", torch.float32)

        return fit_linear_preview(
            decode, vae.latent_channels, vae.latent_downscale, samples=4, size=8, seed=0
        )


CODEC = Flux2Codec()
