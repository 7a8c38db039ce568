"""KL autoencoder (the "VAE" of SD1/SD2/SDXL, SD3 and Flux) in the original LDM key layout.

State-dict keys are exactly those of the original checkpoints once ``first_stage_model.`` / ``vae.``
is stripped: ``encoder.down.0.block.0.norm1.weight``, ``encoder.mid.attn_1.q.weight`` (a 1x1
convolution), ``decoder.up.3.upsample.conv.weight``, ``quant_conv.weight`` ...

Pixels are NCHW in [-1, 1]; latents are in the diffusion model's space:
``latent = (mean - shift_factor) * scaling_factor``. Computation runs in the input's dtype and on its
device (the ops layers cast weights at forward).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from core.detect.catalog import latent_format_for
from core.detect.spec import FLUX_LATENT, LATENT_FORMATS, SD1_LATENT, SD3_LATENT, SDXL_LATENT, LatentFormat
from core.errors import ModelMismatchError
from core.models.attention import attention_heads_first
from core.models.tiling import Progress, tiled_map
from core.ops.layers import OpSet, default_ops

__all__ = ["FLUX_LATENT", "LATENT_FORMATS", "SD1_LATENT", "SD3_LATENT", "SDXL_LATENT", "LatentFormat",
           "latent_format_for"]  # fmt: skip
# The latent formats are family data (core.detect.spec); the VAE scales with them.


@dataclass(frozen=True)
class VAEConfig:
    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 4
    base_channels: int = 128
    channel_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    use_quant_conv: bool = True
    scaling_factor: float = 0.18215
    shift_factor: float = 0.0
    norm_groups: int = 32

    def __post_init__(self) -> None:
        if not self.channel_mult or min(self.channel_mult) < 1:
            raise ValueError(f"channel_mult must be non-empty positive integers, got {self.channel_mult}")
        if self.num_res_blocks < 1 or self.latent_channels < 1 or self.scaling_factor == 0:
            raise ValueError("num_res_blocks and latent_channels must be >= 1 and scaling_factor non-zero")
        bad = [c for c in self.level_channels if c % self.norm_groups]
        if bad:
            raise ValueError(f"channels {bad} are not divisible by norm_groups={self.norm_groups}")

    @property
    def level_channels(self) -> tuple[int, ...]:
        return tuple(self.base_channels * m for m in self.channel_mult)

    @property
    def downscale(self) -> int:
        """Pixels per latent along each side (8 for every real KL-VAE)."""
        return int(2 ** (len(self.channel_mult) - 1))

    def with_latent_format(self, fmt: LatentFormat) -> VAEConfig:
        if fmt.channels != self.latent_channels:
            raise ModelMismatchError(
                f"Latent format {fmt.name!r} has {fmt.channels} channels, the VAE has {self.latent_channels}",
                fix="Pick the format of the diffusion family this VAE belongs to",
            )
        return replace(self, scaling_factor=fmt.scale, shift_factor=fmt.shift)

    @classmethod
    def sd(cls, family: str = "sd1") -> VAEConfig:
        """SD1/SD2/SDXL (identical shapes; only the scaling factor differs)."""
        return cls().with_latent_format(latent_format_for(family))

    @classmethod
    def flux(cls) -> VAEConfig:
        return cls(latent_channels=16, use_quant_conv=False).with_latent_format(FLUX_LATENT)

    @classmethod
    def sd3(cls) -> VAEConfig:
        return cls(latent_channels=16, use_quant_conv=False).with_latent_format(SD3_LATENT)

    @classmethod
    def from_shapes(
        cls,
        shapes: Mapping[str, Sequence[int]],
        *,
        latent_format: LatentFormat | None = None,
        norm_groups: int = 32,
    ) -> VAEConfig:
        """Config from original-layout tensor shapes (prefix already stripped).

        Shapes cannot tell SD1 from SDXL: without ``latent_format`` 4 channels get SD1's factors and
        16 channels Flux's. ``norm_groups`` (32 in every released VAE) has no shape of its own.
        """

        def need(key: str) -> tuple[int, ...]:
            if key not in shapes:
                raise ModelMismatchError(
                    f"Not a KL-VAE in the original layout: {key!r} is missing",
                    why="the architecture is read from encoder/decoder conv_in and the down blocks",
                    fix="Strip the 'first_stage_model.' or 'vae.' prefix, or convert diffusers keys first",
                )
            return tuple(int(s) for s in shapes[key])

        enc_in, dec_in = need("encoder.conv_in.weight"), need("decoder.conv_in.weight")
        base, latent = enc_in[0], dec_in[1]
        levels = 0
        while f"encoder.down.{levels}.block.0.conv1.weight" in shapes:
            levels += 1
        widths = [need(f"encoder.down.{i}.block.0.conv1.weight")[0] for i in range(max(levels, 1))]
        blocks = 0
        while f"encoder.down.0.block.{blocks}.conv1.weight" in shapes:
            blocks += 1
        if any(w % base for w in widths) or need("encoder.conv_out.weight")[0] != 2 * latent:
            raise ModelMismatchError(
                "Inconsistent KL-VAE shapes",
                why=f"level widths {widths} vs base {base}; encoder.conv_out must give 2 x {latent} channels",
            )
        fmt = latent_format or {4: SD1_LATENT, 16: FLUX_LATENT}.get(latent, LatentFormat("raw", latent, 1.0))
        return cls(
            in_channels=enc_in[1],
            out_channels=need("decoder.conv_out.weight")[0],
            latent_channels=latent,
            base_channels=base,
            channel_mult=tuple(w // base for w in widths),
            num_res_blocks=blocks,
            use_quant_conv="quant_conv.weight" in shapes,
            norm_groups=norm_groups,
        ).with_latent_format(fmt)


@dataclass(frozen=True)
class _Build:
    """What every layer of one network is built with."""

    ops: OpSet
    groups: int
    device: torch.device | str | None
    dtype: torch.dtype | None

    def conv(self, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0) -> nn.Conv2d:
        return self.ops.Conv2d(cin, cout, k, stride, pad, device=self.device, dtype=self.dtype)

    def norm(self, c: int) -> nn.GroupNorm:
        return self.ops.GroupNorm(self.groups, c, eps=1e-6, affine=True, device=self.device, dtype=self.dtype)


#: latent side of one tile of a tiled decode (512 px at 8x): what a decode in tiles keeps room for
TILE_LATENT = 64


class ResnetBlock(nn.Module):
    def __init__(self, b: _Build, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = b.norm(cin), b.conv(cin, cout, 3, pad=1)
        self.norm2, self.conv2 = b.norm(cout), b.conv(cout, cout, 3, pad=1)
        self.nin_shortcut = b.conv(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        skip: torch.Tensor = x if self.nin_shortcut is None else self.nin_shortcut(x)
        return skip + h


class AttnBlock(nn.Module):
    """Single-head self-attention over all positions, q/k/v/proj_out as 1x1 convolutions."""

    def __init__(self, b: _Build, c: int) -> None:
        super().__init__()
        self.norm = b.norm(c)
        self.q, self.k, self.v, self.proj_out = (b.conv(c, c, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        n, c, hh, ww = h.shape

        def tokens(t: torch.Tensor) -> torch.Tensor:  # (N, C, H, W) -> (N, 1, HW, C), contiguous for SDPA
            return t.reshape(n, 1, c, hh * ww).transpose(2, 3).contiguous()

        out = attention_heads_first(tokens(self.q(h)), tokens(self.k(h)), tokens(self.v(h)))
        proj: torch.Tensor = self.proj_out(out.transpose(1, 2).reshape(n, c, hh, ww))
        return x + proj


class Downsample(nn.Module):
    def __init__(self, b: _Build, c: int) -> None:
        super().__init__()
        self.conv = b.conv(c, c, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv(F.pad(x, (0, 1, 0, 1)))
        return out


class Upsample(nn.Module):
    def __init__(self, b: _Build, c: int) -> None:
        super().__init__()
        self.conv = b.conv(c, c, 3, pad=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))
        return out


class MidBlock(nn.Module):
    def __init__(self, b: _Build, c: int) -> None:
        super().__init__()
        self.block_1, self.attn_1, self.block_2 = ResnetBlock(b, c, c), AttnBlock(b, c), ResnetBlock(b, c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.block_2(self.attn_1(self.block_1(x)))
        return out


class Level(nn.Module):
    """One resolution level: ``block.N`` resnets then an optional ``downsample``/``upsample``."""

    def __init__(self, blocks: list[ResnetBlock], resample: nn.Module | None, name: str) -> None:
        super().__init__()
        self.block = nn.ModuleList(blocks)
        self.resample_name = name
        if resample is not None:
            self.add_module(name, resample)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.block:
            x = blk(x)
        resample: nn.Module | None = getattr(self, self.resample_name, None)
        return x if resample is None else resample(x)


class Encoder(nn.Module):
    def __init__(self, cfg: VAEConfig, b: _Build) -> None:
        super().__init__()
        widths = cfg.level_channels
        self.conv_in = b.conv(cfg.in_channels, widths[0], 3, pad=1)
        self.down = nn.ModuleList()
        cin = widths[0]
        for i, w in enumerate(widths):
            blocks = [ResnetBlock(b, cin if j == 0 else w, w) for j in range(cfg.num_res_blocks)]
            last = i == len(widths) - 1
            self.down.append(Level(blocks, None if last else Downsample(b, w), "downsample"))
            cin = w
        self.mid = MidBlock(b, widths[-1])
        self.norm_out = b.norm(widths[-1])
        self.conv_out = b.conv(widths[-1], 2 * cfg.latent_channels, 3, pad=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for level in self.down:
            h = level(h)
        out: torch.Tensor = self.conv_out(F.silu(self.norm_out(self.mid(h))))
        return out


class Decoder(nn.Module):
    def __init__(self, cfg: VAEConfig, b: _Build) -> None:
        super().__init__()
        widths = cfg.level_channels
        self.conv_in = b.conv(cfg.latent_channels, widths[-1], 3, pad=1)
        self.mid = MidBlock(b, widths[-1])
        levels: list[Level] = []
        cin = widths[-1]
        for i in reversed(range(len(widths))):
            w = widths[i]
            blocks = [ResnetBlock(b, cin if j == 0 else w, w) for j in range(cfg.num_res_blocks + 1)]
            levels.insert(0, Level(blocks, Upsample(b, w) if i else None, "upsample"))
            cin = w
        self.up = nn.ModuleList(levels)  # indexed by level, run from the deepest
        self.norm_out = b.norm(widths[0])
        self.conv_out = b.conv(widths[0], cfg.out_channels, 3, pad=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(z))
        for level in reversed(self.up):
            h = level(h)
        out: torch.Tensor = self.conv_out(F.silu(self.norm_out(h)))
        return out


class AutoencoderKL(nn.Module):
    def __init__(
        self,
        config: VAEConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        b = _Build(ops, config.norm_groups, device, dtype)
        self.encoder = Encoder(config, b)
        self.decoder = Decoder(config, b)
        z = config.latent_channels
        self.quant_conv = b.conv(2 * z, 2 * z, 1) if config.use_quant_conv else None
        self.post_quant_conv = b.conv(z, z, 1) if config.use_quant_conv else None

    # latent space <-> posterior space
    def process_in(self, mean: torch.Tensor) -> torch.Tensor:
        return (mean - self.config.shift_factor) * self.config.scaling_factor

    def process_out(self, latent: torch.Tensor) -> torch.Tensor:
        return latent / self.config.scaling_factor + self.config.shift_factor

    def moments(self, pixels: torch.Tensor) -> torch.Tensor:
        """Raw posterior parameters (N, 2 x latent_channels, H/8, W/8): mean then log-variance."""
        h = self.encoder(pixels)
        out: torch.Tensor = h if self.quant_conv is None else self.quant_conv(h)
        return out

    def _posterior(
        self, moments: torch.Tensor, sample: bool, generator: torch.Generator | None
    ) -> torch.Tensor:
        mean, logvar = moments.chunk(2, dim=1)
        if sample:
            std = torch.exp(0.5 * logvar.clamp(-30.0, 20.0))
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
            mean = mean + std * noise
        return self.process_in(mean)

    def encode(
        self, pixels: torch.Tensor, *, sample: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Pixels (N, C, H, W) in [-1, 1] -> scaled latent: the posterior mean, or a sample of it."""
        return self._posterior(self.moments(pixels), sample, generator)

    def _decode_raw(self, z: torch.Tensor) -> torch.Tensor:
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)
        out: torch.Tensor = self.decoder(z)
        return out

    def decode(self, latent: torch.Tensor, *, scaled: bool = True) -> torch.Tensor:
        """Scaled latent (N, C, h, w) -> pixels (N, C, 8h, 8w), roughly in [-1, 1] (not clamped).
        ``scaled=False``: the latent is already in the VAE's own space (what a sampler hands back
        after ``process_out``, as ComfyUI's VAEDecode receives it)."""
        return self._decode_raw(self.process_out(latent) if scaled else latent)

    def decode_tiled(
        self,
        latent: torch.Tensor,
        tile: int = TILE_LATENT,
        overlap: int = 16,
        *,
        progress: Progress | None = None,
        scaled: bool = True,
    ) -> torch.Tensor:
        """``decode`` one latent tile (``tile`` x ``tile``, overlapping by ``overlap``) at a time."""
        f = self.config.downscale
        z = self.process_out(latent) if scaled else latent
        return tiled_map(z, self._decode_raw, tile=tile, overlap=overlap, up=f, progress=progress)

    def encode_tiled(
        self,
        pixels: torch.Tensor,
        tile: int = 512,
        overlap: int = 64,
        *,
        sample: bool = False,
        generator: torch.Generator | None = None,
        progress: Progress | None = None,
    ) -> torch.Tensor:
        """``encode`` one pixel tile at a time (sizes in pixels); the posterior is blended, then sampled."""
        f = self.config.downscale
        moments = tiled_map(pixels, self.moments, tile=tile, overlap=overlap, down=f, progress=progress)
        return self._posterior(moments, sample, generator)
