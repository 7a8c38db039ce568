"""The Wan 2.1 / Qwen-Image VAE as a :class:`~core.archs.protocols.LatentCodec`: its loading record
(both key layouts), pixels <-> latents on single pictures, tiled decode, memory and preview.

Latents are 4-D ``[B, 16, H/8, W/8]`` pictures in the VAE's own space; the family's latent format
(``wan21``: per-channel mean and std) maps them into the model's (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import cast

import torch
from torch import Tensor, nn

from core.archs.layouts import Architecture, Tensors
from core.archs.preview import LatentPreview, fit_linear_preview
from core.archs.protocols import TileProgress
from core.archs.wan_vae.keys import diffusers_to_original, original_to_diffusers, read_config
from core.archs.wan_vae.network import WanVAE, WanVAEConfig
from core.detect.spec import WAN21_LATENT
from core.models.tiling import tiled_map

#: latent side of one tile of a tiled decode and the overlap of two tiles: 256 px tiles, 64 px
#: of overlap (diffusers' tiling of this VAE; its activations are about twice a KL VAE's per pixel)
TILE_LATENT = 32
TILE_OVERLAP = 8


class _ShapesOf(Mapping[str, tuple[int, ...]]):
    """The shapes of a mapping of tensors, each asked for only when read (a lazy file's tensors
    are not all opened to read a config)."""

    def __init__(self, tensors: Tensors) -> None:
        self._tensors = tensors

    def __getitem__(self, key: str) -> tuple[int, ...]:
        return tuple(self._tensors[key].shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, key: object) -> bool:
        return key in self._tensors


def _from_diffusers(t: Tensors, family: str) -> Tensors:
    return diffusers_to_original(t, read_config(_ShapesOf(t), "diffusers"))


def _to_diffusers(t: Tensors, family: str) -> Tensors:
    return original_to_diffusers(t, read_config(_ShapesOf(t), "original"))


ARCHITECTURE = Architecture(
    "wan-vae",
    "vae",
    ("vae-wan",),
    configure=lambda shapes, family: read_config(shapes, "original"),
    build=lambda cfg, device, dtype: WanVAE(cfg, device=device, dtype=dtype),
    to_module={"diffusers": _from_diffusers},
    to_file={"diffusers": _to_diffusers},
)


def decode_bytes(config: WanVAEConfig, batch: int, height: int, width: int, dtype: torch.dtype) -> int:
    """Peak activation bytes of a whole decode of a ``height`` x ``width`` picture, from the
    decoder's shape. Per level: a residual block holds its input, the norm's and SiLU's outputs
    and a convolution's output, about ``2 x (c_in + c_out)`` maps of the level's size; an
    upsample holds its input, the doubled map and the convolution's half-width output. The
    mid-block attention holds one ``(hw)^2`` score matrix (one head; counted: the CPU's and older
    GPUs' kernels materialise it)."""
    size = torch.empty((), dtype=dtype).element_size()
    f = config.downscale
    h, w = height // f, width // f
    dims = config.decoder_dims
    widest = 0
    for i in range(len(config.dim_mult)):
        pixels = h * w * 4**i
        cin = dims[i] // 2 if i > 0 else dims[i]
        widest = max(widest, 2 * (cin + dims[i + 1]) * pixels)
        if i != len(config.dim_mult) - 1:  # the upsample into the next level
            widest = max(widest, dims[i + 1] * pixels + dims[i + 1] * pixels * 4 * 3 // 2)
    attention = (h * w) ** 2
    return int(batch * size * (widest + attention))


def fit_latent_preview(vae: WanVAE, *, samples: int = 4, size: int = 8, seed: int = 0) -> LatentPreview:
    """The latent -> RGB map of ``vae``, fitted in the model's space (the sampler's denoised
    latents are previewed): this VAE's latent format is the same for every family it serves."""
    param = next(vae.parameters(), None)
    device = param.device if param is not None and param.device.type != "meta" else torch.device("cpu")
    dtype = param.dtype if param is not None and param.dtype.is_floating_point else torch.float32

    def decode(z: Tensor) -> Tensor:
        with torch.inference_mode():
            raw = WAN21_LATENT.process_out(z).to(device, dtype)
            return vae.decode(raw).to("cpu", torch.float32)

    cfg = vae.config
    return fit_linear_preview(decode, cfg.z_dim, cfg.downscale, samples=samples, size=size, seed=seed)


def _vae(module: nn.Module) -> WanVAE:
    return cast(WanVAE, module)


class WanCodec:
    """Pixels <-> latents through a :class:`~core.archs.wan_vae.network.WanVAE`, one picture frame
    each (the posterior mean on encode, as ComfyUI's VAEEncode)."""

    id = "wan-vae"
    architecture = ARCHITECTURE

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, WanVAE)

    def downscale(self, module: nn.Module) -> int:
        return _vae(module).config.downscale

    def channels(self, module: nn.Module) -> int:
        return _vae(module).config.z_dim

    def encode(self, module: nn.Module, pixels: Tensor) -> Tensor:
        return _vae(module).encode(pixels)

    def decode(self, module: nn.Module, latent: Tensor) -> Tensor:
        return _vae(module).decode(latent)

    def decode_tiled(self, module: nn.Module, latent: Tensor, progress: TileProgress | None = None) -> Tensor:
        vae = _vae(module)
        f = vae.config.downscale
        return tiled_map(latent, vae.decode, tile=TILE_LATENT, overlap=TILE_OVERLAP, up=f, progress=progress)

    def decode_bytes(self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype) -> int:
        return decode_bytes(_vae(module).config, batch, height, width, dtype)

    def tiled_decode_bytes(
        self, module: nn.Module, batch: int, height: int, width: int, dtype: torch.dtype
    ) -> int:
        side = TILE_LATENT * self.downscale(module)
        return decode_bytes(_vae(module).config, batch, min(height, side), min(width, side), dtype)

    def preview(self, module: nn.Module) -> LatentPreview:
        return fit_latent_preview(_vae(module))


CODEC = WanCodec()
