"""Self-Attention Guidance, as ComfyUI's SelfAttentionGuidance (``nodes_sag.py``): the negative
prompt's estimate is blurred where the UNet middle block's first self-attention looks most, noised
back to the current latent, run through the network again on the negative prompt, and the result
steered away from that prediction: ``denoised + (degraded - sag) * scale``.

ComfyUI records the attention map while the negative prompt runs in the CFG batch; Loadout runs the
negative prompt once more with a recording attention (the same map: same latent, sigma and
prompt), so no state crosses the two network calls. That costs one network run per step more."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from core.guidance.base import LEAVE, GuidanceContext, check_record, number
from core.models.attention import attention
from core.models.patches import AttentionCall, NetworkPatches, Site
from core.sampling.patches import CfgCall, ModelPatches

MIDDLE = Site("middle", 0)


def attention_scores(q: Tensor, k: Tensor, heads: int) -> Tensor:
    """softmax(q k^T / sqrt(d)) per head: (B * heads, Lq, Lk), as ComfyUI's basic attention."""
    b, _, width = q.shape
    d = width // heads
    qh = q.reshape(b, -1, heads, d).permute(0, 2, 1, 3).reshape(b * heads, -1, d)
    kh = k.reshape(b, -1, heads, d).permute(0, 2, 1, 3).reshape(b * heads, -1, d)
    scores: Tensor = (torch.einsum("b i d, b j d -> b i j", qh, kh) * d**-0.5).softmax(dim=-1)
    return scores


def gaussian_blur(img: Tensor, kernel_size: int, sigma: float) -> Tensor:
    """A separable Gaussian of ``kernel_size`` taps per channel, reflect-padded."""
    half = (kernel_size - 1) * 0.5
    pdf = torch.exp(-0.5 * (torch.linspace(-half, half, steps=kernel_size) / sigma).pow(2))
    kernel = (pdf / pdf.sum()).to(device=img.device, dtype=img.dtype)
    kernel2d = torch.mm(kernel[:, None], kernel[None, :])
    kernel2d = kernel2d.expand(img.shape[-3], 1, kernel2d.shape[0], kernel2d.shape[1])
    pad = kernel_size // 2
    return F.conv2d(F.pad(img, [pad, pad, pad, pad], mode="reflect"), kernel2d, groups=img.shape[-3])


def degraded(x0: Tensor, scores: Tensor, sigma: float, threshold: float = 1.0) -> Tensor:
    """``x0`` blurred where the attention the heads pay to each position, summed over the queries,
    passes ``threshold`` (the map brought to the latent's size, nearest)."""
    _, hw1, hw2 = scores.shape
    b, _, lh, lw = x0.shape
    mask = scores.reshape(b, -1, hw1, hw2).mean(1, keepdim=False).sum(1, keepdim=False) > threshold
    ratio = 2 ** (math.ceil(math.sqrt(lh * lw / hw1)) - 1).bit_length()
    mid = [math.ceil(lh / ratio), math.ceil(lw / ratio)]
    as_map = F.interpolate(mask.reshape(b, *mid).unsqueeze(1).type(scores.dtype), (lh, lw))
    return gaussian_blur(x0, 9, sigma) * as_map + x0 * (1 - as_map)


@dataclass
class _Scores:
    found: Tensor | None = None


def _recording(scores: _Scores) -> NetworkPatches:
    """The middle block's first self-attention, its scores kept (plain attention elsewhere)."""

    def attend(call: AttentionCall) -> Tensor:
        if call.site == MIDDLE and call.kind == "self" and call.layer == 0:
            scores.found = attention_scores(call.q, call.k, call.heads)
        return attention(call.q, call.k, call.v, call.heads, call.mask)

    return NetworkPatches(replace_attention=attend)


@dataclass(frozen=True)
class Sag:
    name: ClassVar[str] = "sag"
    title: ClassVar[str] = "Self-Attention Guidance"
    scale: float = number(0.5, -2.0, 5.0, "the scale")
    #: ComfyUI allows 0, which divides by zero in the blur (a picture of NaN): the least here is 0.01
    blur_sigma: float = number(2.0, 0.01, 10.0, "the blur sigma")

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        context.points.require(
            self.title, "unsupported_family", blocks=("middle",), attention=("self",), fix=LEAVE
        )
        scale, blur = self.scale, self.blur_sigma

        def post(call: CfgCall, denoised: Tensor) -> Tensor:
            if min(denoised.shape[2:]) <= 4:  # too small for the blur's padding, as ComfyUI
                return denoised
            scores = _Scores()
            if call.predict(_recording(scores), negative=True) is None or scores.found is None:
                return denoised  # no negative prompt in this run (CFG 1)
            worse = degraded(call.uncond, scores.found, blur)
            sag = call.predict(NetworkPatches(), x=worse + call.x - call.uncond, negative=True)
            assert sag is not None
            return denoised + (worse - sag) * scale

        return ModelPatches(post_cfg=(post,))
