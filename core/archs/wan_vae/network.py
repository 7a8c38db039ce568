"""The Wan 2.1 causal 3-D VAE (also Qwen-Image's and Anima's), run on single frames.

The module has the key layout of ComfyUI's ``comfy/ldm/wan/vae.py`` and of the Comfy-Org files
(``wan_2.1_vae.safetensors``, ``qwen_image_vae.safetensors``): ``encoder.conv1``,
``encoder.downsamples.N.residual.{0,2,3,6}``, ``encoder.middle.{0,1,2}``, ``encoder.head.{0,2}``,
``conv1`` / ``conv2`` (the quant convs), ``decoder.upsamples.N...`` (the decoder's levels flattened:
``num_res_blocks + 1`` residual blocks then a resample per level). Its weights are those of the
video VAE, 3-D convolutions included, so one file serves pictures and videos.

**Only the single-frame path is implemented.** A causal convolution pads time on the left only
(``2 x`` its temporal padding, zeros), so on one frame (T = 1) a ``k_t x k x k`` kernel sees zeros
but for its last temporal tap: it is the 2-D convolution with ``weight[:, :, -1]``, which is what
this module computes (ComfyUI's "causal_zero" fast path truncates the weight the same way).
The resamples' ``time_conv`` (temporal up/down by 2) run only from the second chunk of a video
in both references (their first chunk marks the cache and skips it), so on one frame they are
held for the file's sake and never run. Activations are 4-D ``[B, C, H, W]`` throughout; a 5-D
input with T = 1 is taken too, and more frames are refused in words.

Computation runs in the input's dtype on its device (the ops layers cast weights at forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.errors import LoadoutError
from core.models.attention import attention_heads_first
from core.ops.layers import CastWeights, OpSet, cast_to, default_ops

Device = torch.device | str | None
DType = torch.dtype | None


@dataclass(frozen=True)
class WanVAEConfig:
    """Wan 2.1's VAE: ``base_dim`` 96, 16 latent channels, levels ``base_dim x (1, 2, 4, 4)``, two
    residual blocks per encoder level (three per decoder level), temporal downsampling after the
    second and third levels (read from which resamples have a ``time_conv``)."""

    base_dim: int = 96
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    temporal_downsample: tuple[bool, ...] = (False, True, True)
    in_channels: int = 3
    out_channels: int = 3

    def __post_init__(self) -> None:
        if len(self.dim_mult) < 2 or min(self.dim_mult) < 1:
            raise ValueError(f"dim_mult needs two or more positive levels, got {self.dim_mult}")
        if len(self.temporal_downsample) != len(self.dim_mult) - 1:
            raise ValueError(
                f"{len(self.temporal_downsample)} temporal flags for {len(self.dim_mult) - 1} resamples"
            )
        if self.num_res_blocks < 1 or self.z_dim < 1 or self.base_dim < 2:
            raise ValueError("num_res_blocks, z_dim and base_dim must be positive")

    @property
    def downscale(self) -> int:
        """Pixels per latent along each side (8 for Wan 2.1)."""
        return int(2 ** (len(self.dim_mult) - 1))

    @property
    def encoder_dims(self) -> tuple[int, ...]:
        """Channels in and out of each encoder level: ``base_dim x [1, *dim_mult]``."""
        return tuple(self.base_dim * m for m in (1, *self.dim_mult))

    @property
    def decoder_dims(self) -> tuple[int, ...]:
        """``base_dim x [dim_mult[-1], *reversed(dim_mult)]``: the decoder's level widths."""
        return tuple(self.base_dim * m for m in (self.dim_mult[-1], *reversed(self.dim_mult)))


@dataclass(frozen=True)
class _Build:
    ops: OpSet
    device: Device
    dtype: DType

    def causal(self, cin: int, cout: int, k: tuple[int, int, int], stride: int = 1) -> nn.Conv3d:
        """A causal 3-D convolution (spatial padding ``k // 2``; the time padding is causal)."""
        pad = (0, k[1] // 2, k[2] // 2)
        st = (stride, 1, 1)
        return self.ops.Conv3d(cin, cout, k, st, pad, device=self.device, dtype=self.dtype)

    def conv2d(self, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0) -> nn.Conv2d:
        return self.ops.Conv2d(cin, cout, k, stride, pad, device=self.device, dtype=self.dtype)


def frame_conv(conv: nn.Conv3d, x: Tensor) -> Tensor:
    """A causal 3-D convolution on one frame (``x``: ``[B, C, H, W]``): its zero left padding leaves
    only the last temporal tap, so it is the 2-D convolution with ``weight[:, :, -1]``."""
    w, b = cast(CastWeights, conv).cast_weight_bias(x)
    stride, pad = conv.stride[1:], cast(tuple[int, int, int], conv.padding)[1:]
    return F.conv2d(x, w[:, :, -1], b, stride, pad)


class ChannelRMSNorm(nn.Module):
    """Wan's ``RMS_norm``: ``x / ||x||`` over the channels (L2, eps 1e-12) ``x sqrt(C) x gamma``.
    ``gamma`` is ``[C, 1, 1, 1]`` (video activations) or ``[C, 1, 1]`` (the attention's, per frame);
    computed in the input's dtype, as ComfyUI does (diffusers upcasts half precision to float32)."""

    def __init__(self, dim: int, *, frames: bool, device: Device, dtype: DType) -> None:
        super().__init__()
        shape = (dim, 1, 1, 1) if frames else (dim, 1, 1)
        self.scale = dim**0.5
        self.gamma = nn.Parameter(torch.empty(shape, device=device, dtype=dtype), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        gamma = cast_to(self.gamma, x)
        assert gamma is not None
        out: Tensor = F.normalize(x, dim=1) * self.scale * gamma.reshape(-1, 1, 1)
        return out


class ResidualBlock(nn.Module):
    """``residual``: RMS norm (0), SiLU (1), causal 3x3x3 conv (2), RMS norm (3), SiLU (4), dropout
    (5), causal conv (6); ``shortcut``: a 1x1x1 causal conv when the width changes."""

    def __init__(self, b: _Build, cin: int, cout: int) -> None:
        super().__init__()
        self.residual = nn.ModuleList(
            [
                ChannelRMSNorm(cin, frames=True, device=b.device, dtype=b.dtype),
                nn.SiLU(),
                b.causal(cin, cout, (3, 3, 3)),
                ChannelRMSNorm(cout, frames=True, device=b.device, dtype=b.dtype),
                nn.SiLU(),
                nn.Identity(),  # dropout 0 in every released VAE
                b.causal(cout, cout, (3, 3, 3)),
            ]
        )
        self.shortcut = b.causal(cin, cout, (1, 1, 1)) if cin != cout else None

    def forward(self, x: Tensor) -> Tensor:
        r = self.residual
        h = frame_conv(cast(nn.Conv3d, r[2]), F.silu(r[0](x)))
        h = frame_conv(cast(nn.Conv3d, r[6]), F.silu(r[3](h)))
        return h + (x if self.shortcut is None else frame_conv(self.shortcut, x))


class AttentionBlock(nn.Module):
    """Single-head self-attention over one frame's positions: ``norm``, ``to_qkv`` and ``proj``
    (1x1 2-D convolutions)."""

    def __init__(self, b: _Build, dim: int) -> None:
        super().__init__()
        self.norm = ChannelRMSNorm(dim, frames=False, device=b.device, dtype=b.dtype)
        self.to_qkv = b.conv2d(dim, 3 * dim, 1)
        self.proj = b.conv2d(dim, dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        n, c, hh, ww = x.shape
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=1)

        def tokens(t: Tensor) -> Tensor:  # (N, C, H, W) -> (N, 1, HW, C), contiguous for SDPA
            return t.reshape(n, 1, c, hh * ww).transpose(2, 3).contiguous()

        out = attention_heads_first(tokens(q), tokens(k), tokens(v))
        proj: Tensor = self.proj(out.transpose(1, 2).reshape(n, c, hh, ww))
        return x + proj


class Resample(nn.Module):
    """A level's spatial resample, ``resample.1`` a 2-D convolution: ``down`` pads right and bottom
    by one and convolves 3x3 with stride 2; ``up`` doubles the size (nearest) and convolves 3x3 to
    half the channels. ``time_conv`` (the temporal resample of the 3-D modes) runs only from a
    video's second chunk: held, never run here."""

    def __init__(self, b: _Build, dim: int, *, up: bool, temporal: bool) -> None:
        super().__init__()
        self.up = up
        conv = b.conv2d(dim, dim // 2, 3, pad=1) if up else b.conv2d(dim, dim, 3, stride=2)
        self.resample = nn.ModuleList([nn.Identity(), conv])  # 0: ComfyUI's Upsample / ZeroPad2d
        if temporal and up:
            self.time_conv: nn.Conv3d | None = b.causal(dim, 2 * dim, (3, 1, 1))
        elif temporal:
            self.time_conv = b.causal(dim, dim, (3, 1, 1), stride=2)
        else:
            self.time_conv = None

    def forward(self, x: Tensor) -> Tensor:
        conv = self.resample[1]
        if self.up:
            out: Tensor = conv(F.interpolate(x, scale_factor=2.0, mode="nearest-exact"))
        else:
            out = conv(F.pad(x, (0, 1, 0, 1)))
        return out


def _middle(b: _Build, dim: int) -> nn.ModuleList:
    return nn.ModuleList([ResidualBlock(b, dim, dim), AttentionBlock(b, dim), ResidualBlock(b, dim, dim)])


def _head(b: _Build, dim: int, cout: int) -> nn.ModuleList:
    norm = ChannelRMSNorm(dim, frames=True, device=b.device, dtype=b.dtype)
    return nn.ModuleList([norm, nn.SiLU(), b.causal(dim, cout, (3, 3, 3))])


def _run_head(head: nn.ModuleList, x: Tensor) -> Tensor:
    return frame_conv(cast(nn.Conv3d, head[2]), F.silu(head[0](x)))


class Encoder3d(nn.Module):
    def __init__(self, cfg: WanVAEConfig, b: _Build) -> None:
        super().__init__()
        dims = cfg.encoder_dims
        self.conv1 = b.causal(cfg.in_channels, dims[0], (3, 3, 3))
        layers: list[nn.Module] = []
        for i, (cin, cout) in enumerate(pairwise(dims)):
            for j in range(cfg.num_res_blocks):
                layers.append(ResidualBlock(b, cin if j == 0 else cout, cout))
            if i != len(cfg.dim_mult) - 1:
                layers.append(Resample(b, cout, up=False, temporal=cfg.temporal_downsample[i]))
        self.downsamples = nn.ModuleList(layers)
        self.middle = _middle(b, dims[-1])
        self.head = _head(b, dims[-1], 2 * cfg.z_dim)

    def forward(self, x: Tensor) -> Tensor:
        h = frame_conv(self.conv1, x)
        for layer in (*self.downsamples, *self.middle):
            h = layer(h)
        return _run_head(self.head, h)


class Decoder3d(nn.Module):
    def __init__(self, cfg: WanVAEConfig, b: _Build) -> None:
        super().__init__()
        dims = cfg.decoder_dims
        self.conv1 = b.causal(cfg.z_dim, dims[0], (3, 3, 3))
        self.middle = _middle(b, dims[0])
        temporal_up = tuple(reversed(cfg.temporal_downsample))
        layers: list[nn.Module] = []
        for i, (cin, cout) in enumerate(pairwise(dims)):
            cin = cin // 2 if i > 0 else cin  # each upsample halves the channels it hands on
            for j in range(cfg.num_res_blocks + 1):
                layers.append(ResidualBlock(b, cin if j == 0 else cout, cout))
            if i != len(cfg.dim_mult) - 1:
                layers.append(Resample(b, cout, up=True, temporal=temporal_up[i]))
        self.upsamples = nn.ModuleList(layers)
        self.head = _head(b, dims[-1], cfg.out_channels)

    def forward(self, z: Tensor) -> Tensor:
        h = frame_conv(self.conv1, z)
        for layer in (*self.middle, *self.upsamples):
            h = layer(h)
        return _run_head(self.head, h)


def _one_frame(x: Tensor, what: str) -> Tensor:
    """``[B, C, H, W]``, or ``[B, C, 1, H, W]`` squeezed; more frames are refused."""
    if x.ndim == 5 and x.shape[2] == 1:
        return x[:, :, 0]
    if x.ndim == 4:
        return x
    raise LoadoutError(
        f"the Wan VAE got {what} of shape {tuple(x.shape)}",
        why="Loadout runs this VAE on single pictures ([B, C, H, W] or one frame); video is not supported",
        fix="Give it one picture (one frame) at a time",
        code="invalid_shape",
    )


class WanVAE(nn.Module):
    """Encoder, the quant convs ``conv1`` (2z -> 2z) and ``conv2`` (z -> z), decoder.

    :meth:`moments` gives the posterior's mean and log-variance; :meth:`decode` takes a latent in
    the VAE's own space (before the family's latent format); both on ``[B, C, H, W]`` pictures."""

    def __init__(
        self, config: WanVAEConfig, *, ops: OpSet = default_ops, device: Device = None, dtype: DType = None
    ) -> None:
        super().__init__()
        self.config = config
        b = _Build(ops, device, dtype)
        z = config.z_dim
        self.encoder = Encoder3d(config, b)
        self.conv1 = b.causal(2 * z, 2 * z, (1, 1, 1))
        self.conv2 = b.causal(z, z, (1, 1, 1))
        self.decoder = Decoder3d(config, b)

    def moments(self, pixels: Tensor) -> Tensor:
        """Pixels ``[B, 3, H, W]`` in [-1, 1] -> ``[B, 2z, H/8, W/8]``: the mean, then the log-variance."""
        return frame_conv(self.conv1, self.encoder(_one_frame(pixels, "pixels")))

    def encode(self, pixels: Tensor) -> Tensor:
        """The posterior mean (ComfyUI's VAEEncode), in the VAE's own space."""
        return self.moments(pixels).chunk(2, dim=1)[0]

    def decode(self, latent: Tensor) -> Tensor:
        """A latent ``[B, z, h, w]`` in the VAE's own space -> pixels ``[B, 3, 8h, 8w]``, roughly in
        [-1, 1] (not clamped: the picture writer clamps, as ComfyUI's VAE output does)."""
        out: Tensor = self.decoder(frame_conv(self.conv2, _one_frame(latent, "a latent")))
        return out
