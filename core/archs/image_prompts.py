"""Image prompts: the records an architecture package gives for an image encoder (a vision tower
that turns a picture into tokens: SigLIP for FLUX Redux) and for a style model (what turns those
tokens into a diffusion model's prompt tokens: FLUX Redux), found by family through
``core.archs.catalog`` (``IMAGE_ENCODERS``, ``STYLE_MODELS``).

``preprocess`` is ComfyUI's ``clip_preprocess`` (``CLIPVisionEncode``): the picture scaled with
antialiased bicubic so that its shorter side is the encoder's size and centre-cropped (``crop``;
otherwise stretched to the square), rounded to 8 bits, then normalised by the encoder's mean and
std.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Shapes = Mapping[str, tuple[int, ...]]


def clip_preprocess(
    pixels: Tensor, size: int, mean: tuple[float, ...], std: tuple[float, ...], crop: bool = True
) -> Tensor:
    """``[B, 3, H, W]`` in [0, 1] -> ``[B, 3, size, size]`` as ComfyUI's ``clip_preprocess``."""
    h, w = pixels.shape[-2], pixels.shape[-1]
    if not (h == size and w == size):
        if crop:
            scale = size / min(h, w)
            to = (round(scale * h), round(scale * w))
        else:
            to = (size, size)
        pixels = F.interpolate(pixels, size=to, mode="bicubic", antialias=True)
        top, left = (pixels.shape[-2] - size) // 2, (pixels.shape[-1] - size) // 2
        pixels = pixels[:, :, top : top + size, left : left + size]
    pixels = torch.clip(255.0 * pixels, 0, 255).round() / 255.0
    m = torch.tensor(mean, dtype=pixels.dtype, device=pixels.device).view(3, 1, 1)
    s = torch.tensor(std, dtype=pixels.dtype, device=pixels.device).view(3, 1, 1)
    return (pixels - m) / s


@dataclass(frozen=True)
class ImageEncoderArchitecture:
    """How an image encoder family is built from its file and run.

    ``id``: the family (``siglip-so400m``); ``configure``: the config from the file's shapes;
    ``build``: the module on a device (``meta`` to plan); ``ignored``: whether a file key is known
    and deliberately not loaded (an unused head); ``size``, ``mean``, ``std``: its preprocessing.
    The module's forward takes the preprocessed pixels and returns the hidden state image prompts
    read (ComfyUI's ``last_hidden_state``)."""

    id: str
    title: str
    configure: Callable[[Shapes], Any]
    build: Callable[[Any, torch.device | str | None, torch.dtype | None], nn.Module]
    ignored: Callable[[str], bool]
    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    module_type: type[nn.Module]

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, self.module_type)

    def encode(self, module: nn.Module, pixels: Tensor, *, crop: bool = True, dtype: torch.dtype) -> Tensor:
        """ComfyUI's ``CLIPVisionEncode``: ``[B, 3, H, W]`` in [0, 1] -> ``[B, tokens, width]``
        (the forward in ``dtype``; the result in float32, as ComfyUI hands it on)."""
        ready = clip_preprocess(pixels.float(), self.size, self.mean, self.std, crop)
        device = next((p.device for p in module.parameters() if p.device.type != "meta"), pixels.device)
        out: Tensor = module(ready.to(device=device, dtype=dtype))
        return out.float()


@dataclass(frozen=True)
class StyleModelArchitecture:
    """How a style model family (FLUX Redux: ``id`` ``flux``, the LoRA group of the models it
    fits) is built from its file and turns an image encoder's hidden state into prompt tokens
    (``tokens``: ComfyUI's ``StyleModel.get_cond``)."""

    id: str
    title: str
    encoder: str  # the image encoder family whose hidden state it reads
    configure: Callable[[Shapes], Any]
    build: Callable[[Any, torch.device | str | None, torch.dtype | None], nn.Module]
    module_type: type[nn.Module]

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, self.module_type)

    def tokens(self, module: nn.Module, hidden: Tensor, *, dtype: torch.dtype) -> Tensor:
        """``[B, tokens, encoder width]`` -> ``[B, tokens, context width]``, in float32."""
        device = next((p.device for p in module.parameters() if p.device.type != "meta"), hidden.device)
        out: Tensor = module(hidden.to(device=device, dtype=dtype))
        return out.float()
