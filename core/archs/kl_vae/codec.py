"""The KL autoencoder (SD1/SD2/SDXL's 4-channel VAE, SD3's and Flux's 16-channel one) as a
:class:`~core.archs.protocols.LatentCodec`."""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from core.archs.kl_vae.keys import vae_diffusers_to_original
from core.archs.layouts import Architecture, Shapes, Tensors
from core.archs.preview import LatentPreview, fit_linear_preview
from core.archs.protocols import TileProgress
from core.detect.catalog import latent_format_for
from core.models.vae import TILE_LATENT, AutoencoderKL, VAEConfig

#: VAE families whose file carries a latent format of its own (SD3's VAE: its scale and shift)
_OWN_FORMAT = ("vae-sd3",)


def _config(shapes: Shapes, family: str) -> VAEConfig:
    fmt = latent_format_for(family) if family in _OWN_FORMAT else None
    return VAEConfig.from_shapes(shapes, latent_format=fmt)


def _from_diffusers(t: Tensors, family: str) -> Tensors:
    latent = t["decoder.conv_in.weight"].shape[1]
    return vae_diffusers_to_original(t, VAEConfig.sd() if latent == 4 else VAEConfig.flux())


ARCHITECTURE = Architecture(
    "kl-vae",
    "vae",
    ("vae-sd", "vae-flux", "vae-sd3"),
    configure=_config,
    build=lambda cfg, device, dtype: AutoencoderKL(cfg, device=device, dtype=dtype),
    to_module={"diffusers": _from_diffusers},
)


def decode_bytes(vae: AutoencoderKL, batch: int, height: int, width: int, dtype: torch.dtype) -> int:
    """Peak activation bytes of a whole (untiled) decode, from the decoder's shape: at each level,
    about three feature maps of that level's width are alive in a resnet block (input, hidden, the
    residual sum), and the mid-block attention holds one (hw/64)^2 score matrix unless attention is
    computed in blocks (we count it: the CPU's and older GPUs' kernels materialise it)."""
    cfg = vae.config
    size = torch.empty((), dtype=dtype).element_size()
    f = cfg.downscale
    h, w = height // f, width // f
    widest = 0
    channels = [cfg.base_channels * m for m in cfg.channel_mult]
    for level, ch in enumerate(reversed(channels)):
        scale = 2**level
        # the input of a level's first resnet has the previous (wider) level's channels
        prev = channels[-level] if level > 0 else ch
        widest = max(widest, (max(ch, prev) + ch) * h * scale * w * scale)
    attention = (h * w) ** 2
    return int(batch * size * (1.5 * widest + attention))


def fit_latent_preview(
    vae: AutoencoderKL, *, samples: int = 4, size: int = 8, seed: int = 0
) -> LatentPreview:
    """Fit the latent -> RGB map of ``vae`` from its decodes of a few smooth latents (in the
    model's space: the sampler's denoised latents are previewed)."""
    param = next(vae.parameters(), None)
    device = param.device if param is not None and param.device.type != "meta" else torch.device("cpu")

    def decode(z: Tensor) -> Tensor:
        with torch.inference_mode():
            return vae.decode(z.to(device)).to("cpu", torch.float32)

    channels, downscale = vae.config.latent_channels, vae.config.downscale
    return fit_linear_preview(decode, channels, downscale, samples=samples, size=size, seed=seed)


def _vae(module: nn.Module) -> AutoencoderKL:
    return cast(AutoencoderKL, module)


class KLCodec:
    """Pixels <-> latents through an :class:`~core.models.vae.AutoencoderKL` (the posterior mean
    on encode, as ComfyUI's VAEEncode; tiles of 64 latents overlapping by 16 when tiled)."""

    id = "kl-vae"
    architecture = ARCHITECTURE

    def owns(self, module: nn.Module) -> bool:
        return type(module) is AutoencoderKL  # subclasses (FLUX.2's VAE) have codecs of their own

    def downscale(self, module: nn.Module) -> int:
        return _vae(module).config.downscale

    def channels(self, module: nn.Module) -> int:
        return _vae(module).config.latent_channels

    def encode(self, module: nn.Module, pixels: Tensor) -> Tensor:
        mean: Tensor = _vae(module).moments(pixels).chunk(2, dim=1)[0]
        return mean

    def decode(self, module: nn.Module, latent: Tensor) -> Tensor:
        return _vae(module).decode(latent, scaled=False)

    def decode_tiled(self, module: nn.Module, latent: Tensor, progress: TileProgress | None = None) -> Tensor:
        return _vae(module).decode_tiled(latent, progress=progress, scaled=False)

    def decode_bytes(self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype) -> int:
        return decode_bytes(_vae(module), batch, height, width, dtype)

    def tiled_decode_bytes(
        self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype
    ) -> int:
        side = TILE_LATENT * self.downscale(module)
        return decode_bytes(_vae(module), batch, min(height, side), min(width, side), dtype)

    def preview(self, module: nn.Module) -> LatentPreview:
        return fit_latent_preview(_vae(module))


CODEC = KLCodec()
