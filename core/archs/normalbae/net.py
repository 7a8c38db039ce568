"""NormalBAE (Bae, Budvytis and Cipolla's surface-normal network, "Estimating and Exploiting the
Aleatoric Uncertainty in Surface Normal Estimation", as lllyasviel's ``scannet.pt`` holds it;
controlnet_aux's ``NNET`` with the ``BN`` decoder), built from Loadout's op layers.

The encoder (:mod:`.encoder`, EfficientNet-B5) gives maps at 1/2 ... 1/32 of the picture; the
decoder takes the 1/32 head map through a 1x1 convolution and four upsampling blocks (each: resize
bilinearly with corners aligned to the next tapped map, concatenate it, two 3x3 convolutions with
batch norm and leaky ReLU) to 1/16, 1/8, 1/4, 1/2. At 1/8 a 3x3 convolution predicts four channels:
a normal (x, y, z) and its concentration kappa. Then, as the network runs at inference (the
reference's ``mode='test'``: every pixel refined, no sampling), three times: the finer decoder map
and the prediction are both upscaled by 2 (bilinear, corners aligned), concatenated and passed
through four 1x1 convolutions (ReLU between) to a new four-channel prediction, at 1/4, 1/2 and the
full size. Each prediction is normalized: the normal to unit length (over its length + 1e-10),
kappa to ELU(kappa) + 1.01. The full-size one is the output; the uncertainty channel is output too
but the normal map uses only (x, y, z), as the reference's detector does.

Module names follow the file's (``encoder.original_model.*``, ``decoder.up1._net.0`` ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core import ops
from core.archs.normalbae.encoder import BatchNorm, EfficientNet, EncoderConfig

DECODER_BN_EPS = 1e-5  # the decoder's batch norms are torch's defaults
MIN_KAPPA = 0.01
#: the picture's sides must be multiples of this (the encoder halves it five times)
MULTIPLE = 32


@dataclass(frozen=True)
class NormalBaeConfig:
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    features: int = 2048  # the decoder's first map (its 1x1 convolution of the head's)
    ups: tuple[int, int, int, int] = (1024, 512, 256, 128)  # the four upsampling blocks' widths
    refine: int = 128  # the 1x1 refinement heads' inner width


class UpSample(nn.Module):
    def __init__(self, cin: int, cout: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        eps = DECODER_BN_EPS
        self._net = nn.Sequential(
            ops.Conv2d(cin, cout, 3, padding=1, device=device), BatchNorm(cout, eps, device=device),
            nn.LeakyReLU(), ops.Conv2d(cout, cout, 3, padding=1, device=device),
            BatchNorm(cout, eps, device=device), nn.LeakyReLU(),
        )  # fmt: skip

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        up = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=True)
        out: Tensor = self._net(torch.cat([up, skip], 1))
        return out


def _refine_head(cin: int, width: int, device: torch.device | str | None) -> nn.Sequential:
    return nn.Sequential(
        ops.Conv1d(cin, width, 1, device=device), nn.ReLU(), ops.Conv1d(width, width, 1, device=device),
        nn.ReLU(), ops.Conv1d(width, width, 1, device=device), nn.ReLU(),
        ops.Conv1d(width, 4, 1, device=device),
    )  # fmt: skip


def normalized(pred: Tensor) -> Tensor:
    """(B, 4, ...) -> the normal at unit length and kappa as ELU + 1 + 0.01."""
    x, y, z, kappa = torch.split(pred, 1, dim=1)
    length = torch.sqrt(x**2.0 + y**2.0 + z**2.0) + 1e-10
    return torch.cat([x / length, y / length, z / length, F.elu(kappa) + 1.0 + MIN_KAPPA], dim=1)


def _twice(x: Tensor) -> Tensor:
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)


class Decoder(nn.Module):
    def __init__(self, cfg: NormalBaeConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        enc = cfg.encoder
        skips = [enc.stages[i].width for i in (4, 2, 1, 0)]
        self.conv2 = ops.Conv2d(enc.head, cfg.features, 1, device=device)
        widths = (cfg.features, *cfg.ups)
        ups = [UpSample(widths[i] + skips[i], widths[i + 1], device=device) for i in range(4)]
        self.up1, self.up2, self.up3, self.up4 = ups
        self.out_conv_res8 = ops.Conv2d(cfg.ups[1], 4, 3, padding=1, device=device)
        self.out_conv_res4 = _refine_head(cfg.ups[1] + 4, cfg.refine, device)
        self.out_conv_res2 = _refine_head(cfg.ups[2] + 4, cfg.refine, device)
        self.out_conv_res1 = _refine_head(cfg.ups[3] + 4, cfg.refine, device)

    def _refined(self, head: nn.Module, features: Tensor, pred: Tensor) -> Tensor:
        both = torch.cat([_twice(features), _twice(pred)], 1)
        b, c, h, w = both.shape
        out: Tensor = head(both.view(b, c, -1))
        return normalized(out).view(b, 4, h, w)

    def forward(self, taps: list[Tensor]) -> Tensor:
        half, quarter, eighth, sixteenth, head = taps
        x = self.conv2(head)
        x = self.up1(x, sixteenth)
        at8 = self.up2(x, eighth)
        at4 = self.up3(at8, quarter)
        at2 = self.up4(at4, half)
        pred = normalized(self.out_conv_res8(at8))
        pred = self._refined(self.out_conv_res4, at8, pred)
        pred = self._refined(self.out_conv_res2, at4, pred)
        return self._refined(self.out_conv_res1, at2, pred)


class _Encoder(nn.Module):
    def __init__(self, cfg: EncoderConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.original_model = EfficientNet(cfg, device=device)

    def forward(self, x: Tensor) -> list[Tensor]:
        out: list[Tensor] = self.original_model(x)
        return out


class NormalBae(nn.Module):
    """(B, 3, H, W) pictures normalized with ImageNet's mean and std, H and W multiples of 32 ->
    (B, 4, H, W): the unit normal (x, y, z) and kappa at every pixel."""

    def __init__(self, cfg: NormalBaeConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = _Encoder(cfg.encoder, device=device)
        self.decoder = Decoder(cfg, device=device)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.decoder(self.encoder(x))
        return out
