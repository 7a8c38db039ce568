"""The patches that change the UNet's forward pass, as ComfyUI's nodes do: FreeU and FreeU_V2
(``nodes_freelunch.py``: the backbone's and skips' features where the output side joins them)
and Deep Shrink (``nodes_model_downscale.py``, PatchModelAddDownscale: the features downscaled
after an input block for the first part of the schedule, scaled back where the output side
meets the skip of that size).

Each is a model wrapper that adds its network patches to the call (so they run after a
ControlNet's, in ComfyUI's order: the control is added to the skip before the output block
patch sees it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from core.guidance.base import (
    LEAVE,
    RESIZE_METHODS,
    GuidanceContext,
    Resize,
    check_record,
    choice,
    flag,
    number,
    refuse,
)
from core.models.patches import NetworkPatches, Site
from core.sampling.patches import Apply, ModelCall, ModelPatches


def fourier_filter(x: Tensor, threshold: int, scale: float) -> Tensor:
    """FreeU's filter: the centred low frequencies (a ``2*threshold`` square) of each channel
    multiplied by ``scale`` (in float32, back to ``x``'s dtype)."""
    freq = torch.fft.fftshift(torch.fft.fftn(x.float(), dim=(-2, -1)), dim=(-2, -1))
    b, c, h, w = freq.shape
    mask = torch.ones((b, c, h, w), device=x.device)
    crow, ccol = h // 2, w // 2
    mask[..., crow - threshold : crow + threshold, ccol - threshold : ccol + threshold] = scale
    freq = torch.fft.ifftshift(freq * mask, dim=(-2, -1))
    out: Tensor = torch.fft.ifftn(freq, dim=(-2, -1)).real.to(x.dtype)
    return out


def _scaled_half(h: Tensor, factor: Tensor | float) -> Tensor:
    half = h.shape[1] // 2
    return torch.cat([h[:, :half] * factor, h[:, half:]], dim=1)


def freeu(h: Tensor, skip: Tensor, b: float, s: float) -> tuple[Tensor, Tensor]:
    """FreeU: the backbone's first half of channels times ``b``, the skip's low frequencies times ``s``."""
    return _scaled_half(h, b), fourier_filter(skip, 1, s)


def freeu_v2(h: Tensor, skip: Tensor, b: float, s: float) -> tuple[Tensor, Tensor]:
    """FreeU_V2: the first half scaled by ``(b - 1) * m + 1``, ``m`` the channel mean normalised to
    0..1 over the picture; the skip filtered as FreeU's."""
    mean = h.mean(1).unsqueeze(1)
    batch = mean.shape[0]
    hi, _ = torch.max(mean.view(batch, -1), dim=-1, keepdim=True)
    lo, _ = torch.min(mean.view(batch, -1), dim=-1, keepdim=True)
    mean = (mean - lo.unsqueeze(2).unsqueeze(3)) / (hi - lo).unsqueeze(2).unsqueeze(3)
    return _scaled_half(h, (b - 1) * mean + 1), fourier_filter(skip, 1, s)


def _adding(more: NetworkPatches) -> ModelPatches:
    def wrapper(call: ModelCall, apply: Apply) -> Tensor:
        return apply(call.with_patches(more))

    return ModelPatches(wrappers=(wrapper,))


def _unet_channels(context: GuidanceContext, feature: str) -> int:
    context.points.require(feature, "unsupported_family", joins=0, fix=LEAVE)
    if context.model_channels is None:
        raise refuse(feature, "it scales a UNet's features by their number of channels")
    return context.model_channels


@dataclass(frozen=True)
class FreeU:
    name: ClassVar[str] = "freeu"
    title: ClassVar[str] = "FreeU"
    b1: float = number(1.1, 0.0, 10.0, "b1")
    b2: float = number(1.2, 0.0, 10.0, "b2")
    s1: float = number(0.9, 0.0, 10.0, "s1")
    s2: float = number(0.2, 0.0, 10.0, "s2")

    def __post_init__(self) -> None:
        check_record(self)

    def join(self, model_channels: int, v2: bool) -> NetworkPatches:
        """The join patch: by the backbone's channels, ``4 * model channels`` gets (b1, s1) and
        ``2 * model channels`` (b2, s2), as ComfyUI's ``scale_dict``."""
        scales = {model_channels * 4: (self.b1, self.s1), model_channels * 2: (self.b2, self.s2)}
        fn = freeu_v2 if v2 else freeu

        def patch(h: Tensor, skip: Tensor, site: Site) -> tuple[Tensor, Tensor]:
            scale = scales.get(int(h.shape[1]))
            return (h, skip) if scale is None else fn(h, skip, *scale)

        return NetworkPatches(joins=(patch,))

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        return _adding(self.join(_unet_channels(context, self.title), v2=False))


@dataclass(frozen=True)
class FreeUV2(FreeU):
    name: ClassVar[str] = "freeu_v2"
    title: ClassVar[str] = "FreeU_V2"
    b1: float = number(1.3, 0.0, 10.0, "b1")
    b2: float = number(1.4, 0.0, 10.0, "b2")
    s1: float = number(0.9, 0.0, 10.0, "s1")
    s2: float = number(0.2, 0.0, 10.0, "s2")

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        return _adding(self.join(_unet_channels(context, self.title), v2=True))


def downscaled(h: Tensor, factor: float, method: str, resize: Resize) -> Tensor:
    """Deep Shrink's downscale: ``round(size / factor)`` (ComfyUI's ``common_upscale``)."""
    return resize(h, round(h.shape[-1] * (1.0 / factor)), round(h.shape[-2] * (1.0 / factor)), method)


@dataclass(frozen=True)
class DeepShrink:
    """PatchModelAddDownscale (Kohya's Deep Shrink)."""

    name: ClassVar[str] = "deep_shrink"
    title: ClassVar[str] = "Deep Shrink"
    block_number: int = number(3, 1, 32, "the block number", integer=True)
    downscale_factor: float = number(2.0, 0.1, 9.0, "the downscale factor")
    start_percent: float = number(0.0, 0.0, 1.0, "the start percent")
    end_percent: float = number(0.35, 0.0, 1.0, "the end percent")
    downscale_after_skip: bool = flag(True, "downscale after skip")
    downscale_method: str = choice("bicubic", RESIZE_METHODS, "the downscale method")
    upscale_method: str = choice("bicubic", RESIZE_METHODS, "the upscale method")

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        stage = "input_after_skip" if self.downscale_after_skip else "input"
        context.points.require(self.title, "unsupported_family", blocks=(stage,), joins=0, fix=LEAVE)
        if self.block_number >= context.points.blocks[stage]:
            count = context.points.blocks[stage]
            raise refuse(self.title, f"block {self.block_number} is past this UNet's {count} input blocks")
        start = float(context.sampling.percent_to_sigma(self.start_percent))
        end = float(context.sampling.percent_to_sigma(self.end_percent))
        resize, number_, factor = context.resize, self.block_number, self.downscale_factor
        down_method, up_method = self.downscale_method, self.upscale_method

        def down(h: Tensor, site: Site) -> Tensor:
            if site == Site(stage, number_):
                return downscaled(h, factor, down_method, resize)
            return h

        def up(h: Tensor, skip: Tensor, site: Site) -> tuple[Tensor, Tensor]:
            if h.shape[2] != skip.shape[2]:
                h = resize(h, skip.shape[-1], skip.shape[-2], up_method)
            return h, skip

        def wrapper(call: ModelCall, apply: Apply) -> Tensor:
            sigma = float(call.sigma[0])
            if end <= sigma <= start:
                call = call.with_patches(NetworkPatches(blocks=(down,)))
            return apply(call)

        return ModelPatches(wrappers=(wrapper,)) + _adding(NetworkPatches(joins=(up,)))
