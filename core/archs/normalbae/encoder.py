"""NormalBAE's encoder: EfficientNet-B5 as the TensorFlow port ``tf_efficientnet_b5_ap`` holds it
(the geffnet copy controlnet_aux vendors), built from Loadout's op layers.

TensorFlow's conventions, kept so the ported weights compute what they computed: "same" padding
(a stride-2 convolution pads by what the input's size needs, the extra pixel on the right and
bottom; a stride-1 one symmetrically), batch norms with eps 1e-3, swish (SiLU) activations, and a
squeeze-excite in every block whose middle width is a quarter of the block's input width, rounded.
Seven stages of blocks: the first depthwise-separable (depthwise, SE, projection, a residual when
the width stays), the others inverted residuals (1x1 expansion by 6, depthwise, SE, 1x1
projection, a residual when the width and size stay); then the 1x1 head convolution.

Module names follow the file's (``original_model.conv_stem``, ``original_model.blocks.S.B.conv_dw``
...). The head's batch norm (``bn2``) is in the file but not in the network: NormalBAE's decoder
takes the head convolution's output before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core import ops
from core.ops.layers import cast_to

BN_EPS = 1e-3  # TensorFlow's batch-norm epsilon, as the TF ports keep it
#: each stage's first stride (EfficientNet's; not in a file's shapes)
STRIDES = (1, 2, 2, 2, 1, 2, 1)
#: the stages whose outputs the decoder takes (with the head), finest first
TAPPED = (0, 1, 2, 4)


@dataclass(frozen=True)
class Stage:
    blocks: int
    kernel: int  # the depthwise convolution's
    width: int  # output channels
    expand: int  # the middle width over the input width (1: a depthwise-separable block)


@dataclass(frozen=True)
class EncoderConfig:
    """``tf_efficientnet_b5_ap``'s by default (widths x1.6, depths x2.2 of B0's)."""

    stem: int = 48
    stages: tuple[Stage, ...] = (
        Stage(3, 3, 24, 1), Stage(5, 3, 40, 6), Stage(5, 5, 64, 6), Stage(7, 3, 128, 6),
        Stage(7, 5, 176, 6), Stage(9, 5, 304, 6), Stage(3, 3, 512, 6),
    )  # fmt: skip
    head: int = 2048

    def block_widths(self, stage: int) -> tuple[int, int]:
        """(input width of the stage's first block, the stage's width)."""
        before = self.stem if stage == 0 else self.stages[stage - 1].width
        return before, self.stages[stage].width


def make_divisible(v: float, divisor: int = 8) -> int:
    """geffnet's channel rounding (to ``divisor``, never down by more than 10 %)."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


def se_width(in_width: int) -> int:
    return max(1, int(in_width * 0.25 + 0.5))


class BatchNorm(nn.Module):
    """Inference batch norm over (B, C, H, W) with the file's running statistics (cast to the input
    at forward, like the op layers' weights); state keys as ``nn.BatchNorm2d``'s, less its
    ``num_batches_tracked`` (a training counter the file carries and the network never reads)."""

    running_mean: Tensor
    running_var: Tensor

    def __init__(self, width: int, eps: float, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(width, device=device), requires_grad=False)
        self.bias = nn.Parameter(torch.empty(width, device=device), requires_grad=False)
        self.register_buffer("running_mean", torch.empty(width, device=device))
        self.register_buffer("running_var", torch.empty(width, device=device))

    def forward(self, x: Tensor) -> Tensor:
        mean, var = cast_to(self.running_mean, x), cast_to(self.running_var, x)
        return F.batch_norm(
            x, mean, var, cast_to(self.weight, x), cast_to(self.bias, x), False, 0.0, self.eps
        )


class SameConv2d(ops.Conv2d):
    """A convolution with TensorFlow's "same" padding: symmetric at stride 1, and at stride 2 what
    the input's size needs (the odd pixel on the right and bottom), padded at forward."""

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, bias: bool = False,
        *, device: torch.device | str | None = None,
    ) -> None:  # fmt: skip
        pad = (kernel - 1) // 2 if stride == 1 else 0
        super().__init__(cin, cout, kernel, stride, pad, groups=groups, bias=bias, device=device)

    def forward(self, x: Tensor) -> Tensor:
        s = int(self.stride[0])
        if s > 1:
            k = int(self.kernel_size[0])
            pads = []
            for size in (x.shape[-1], x.shape[-2]):
                total = max((-(size // -s) - 1) * s + k - size, 0)
                pads += [total // 2, total - total // 2]
            x = F.pad(x, pads)
        return super().forward(x)


class SqueezeExcite(nn.Module):
    def __init__(self, width: int, middle: int, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.conv_reduce = ops.Conv2d(width, middle, 1, device=device)
        self.conv_expand = ops.Conv2d(middle, width, 1, device=device)

    def forward(self, x: Tensor) -> Tensor:
        s: Tensor = self.conv_expand(F.silu(self.conv_reduce(x.mean((2, 3), keepdim=True))))
        return x * s.sigmoid()


class SeparableBlock(nn.Module):
    """Depthwise, SE, projection (no activation after it)."""

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, *, device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        self.residual = stride == 1 and cin == cout
        self.conv_dw = SameConv2d(cin, cin, kernel, stride, groups=cin, device=device)
        self.bn1 = BatchNorm(cin, BN_EPS, device=device)
        self.se = SqueezeExcite(cin, se_width(cin), device=device)
        self.conv_pw = SameConv2d(cin, cout, 1, device=device)
        self.bn2 = BatchNorm(cout, BN_EPS, device=device)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.bn2(self.conv_pw(self.se(F.silu(self.bn1(self.conv_dw(x))))))
        return y + x if self.residual else y


class InvertedResidual(nn.Module):
    """1x1 expansion, depthwise, SE (its width from the block's input), 1x1 projection."""

    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, expand: int,
        *, device: torch.device | str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        mid = make_divisible(cin * expand)
        self.residual = stride == 1 and cin == cout
        self.conv_pw = SameConv2d(cin, mid, 1, device=device)
        self.bn1 = BatchNorm(mid, BN_EPS, device=device)
        self.conv_dw = SameConv2d(mid, mid, kernel, stride, groups=mid, device=device)
        self.bn2 = BatchNorm(mid, BN_EPS, device=device)
        self.se = SqueezeExcite(mid, se_width(cin), device=device)
        self.conv_pwl = SameConv2d(mid, cout, 1, device=device)
        self.bn3 = BatchNorm(cout, BN_EPS, device=device)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = F.silu(self.bn1(self.conv_pw(x)))
        y = self.se(F.silu(self.bn2(self.conv_dw(y))))
        y = self.bn3(self.conv_pwl(y))
        return y + x if self.residual else y


class EfficientNet(nn.Module):
    """(B, 3, H, W) -> the tapped stages' outputs (1/2, 1/4, 1/8, 1/16 of the picture) and the head
    convolution's output (1/32), H and W multiples of 32."""

    def __init__(self, cfg: EncoderConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.conv_stem = SameConv2d(3, cfg.stem, 3, 2, device=device)
        self.bn1 = BatchNorm(cfg.stem, BN_EPS, device=device)
        stages: list[nn.Module] = []
        for i, stage in enumerate(cfg.stages):
            cin, cout = cfg.block_widths(i)
            blocks: list[nn.Module] = []
            for b in range(stage.blocks):
                stride = STRIDES[i] if b == 0 else 1
                width_in = cin if b == 0 else cout
                if stage.expand == 1:
                    blocks.append(SeparableBlock(width_in, cout, stage.kernel, stride, device=device))
                else:
                    blocks.append(
                        InvertedResidual(width_in, cout, stage.kernel, stride, stage.expand, device=device)
                    )
            stages.append(nn.Sequential(*blocks))
        self.blocks = nn.Sequential(*stages)
        self.conv_head = SameConv2d(cfg.stages[-1].width, cfg.head, 1, device=device)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = F.silu(self.bn1(self.conv_stem(x)))
        taps: list[Tensor] = []
        for i, stage in enumerate(self.blocks):
            x = stage(x)
            if i in TAPPED:
                taps.append(x)
        taps.append(self.conv_head(x))
        return taps
