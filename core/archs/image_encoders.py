"""What the packages of image prompts give, read by ``core.archs.catalog``:

* an **image encoder** (kind ``image_encoder``: the vision towers image prompts read, in ComfyUI's
  ``models/clip_vision``: CLIP's for IP-Adapter, SigLIP's for FLUX Redux): the transformers-layout
  tensors its file layouts hold, the config and the network built from them, and the encoding of a
  picture as ComfyUI's ``CLIPVisionEncode`` gives it. A package exports ``IMAGE_ENCODER``;
  ``core.archs.catalog.image_encoder_for(family)`` finds it by one of its ``families``;
* an **image-prompt adapter** (IP-Adapter: a package's ``IMAGE_PROMPT_ADAPTER``);
* a **style model** (FLUX Redux: a package's ``STYLE_MODELS``), which turns an encoder's hidden
  state into prompt tokens.

:func:`clip_preprocess` is ComfyUI's ``clip_preprocess``, which every encoder's ``encode`` uses
with its own size, mean and standard deviation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.models.patches import Site


@dataclass(frozen=True)
class EncodedImage:
    """One encoding of a batch of pictures: the last layer's tokens (before the final norm), the
    penultimate layer's tokens and the pooled, projected embedding (``image_embeds``)."""

    last_hidden_state: Tensor
    penultimate: Tensor
    image_embeds: Tensor


def clip_preprocess(
    pixels: Tensor, size: int, mean: Sequence[float], std: Sequence[float], crop: bool = True
) -> Tensor:
    """ComfyUI's ``clip_preprocess`` (its ``CLIPVisionEncode``): ``[B, 3, H, W]`` in [0, 1] ->
    ``[B, 3, size, size]``: scaled with antialiased bicubic so that the shorter side is ``size`` and
    centre-cropped (``crop``; otherwise stretched to the square), rounded to 8 bits again
    (``round(clip(255 x)) / 255``), then normalised by ``mean`` and ``std`` per channel."""
    h, w = pixels.shape[-2], pixels.shape[-1]
    if h != size or w != size:
        scale = size / min(h, w)
        to = (round(scale * h), round(scale * w)) if crop else (size, size)
        pixels = F.interpolate(pixels, size=to, mode="bicubic", antialias=True)
        top, left = (pixels.shape[-2] - size) // 2, (pixels.shape[-1] - size) // 2
        pixels = pixels[:, :, top : top + size, left : left + size]
    pixels = torch.clip(255.0 * pixels, 0, 255).round() / 255.0
    m = torch.tensor(tuple(mean), dtype=pixels.dtype, device=pixels.device).view(3, 1, 1)
    s = torch.tensor(tuple(std), dtype=pixels.dtype, device=pixels.device).view(3, 1, 1)
    return (pixels - m) / s


class TensorSource(Protocol):
    """Where one tensor of the network is in the file (``key``), and its shape there."""

    @property
    def key(self) -> str: ...

    def read(self, get: Callable[[str], torch.Tensor]) -> torch.Tensor: ...

    def shape(self, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class FileTensor:
    """A tensor the file holds as the network has it, under ``key``."""

    key: str

    def read(self, get: Callable[[str], torch.Tensor]) -> torch.Tensor:
        return get(self.key)

    def shape(self, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
        return tuple(shapes[self.key])


class ImageEncoderArchitecture(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def families(self) -> tuple[str, ...]: ...

    def sources(self, shapes: Mapping[str, Sequence[int]], layout: str) -> dict[str, TensorSource]:
        """The network's key -> its source in a file of ``layout`` (keys it does not name are
        listed by :meth:`ignored` or refused)."""
        ...

    def ignored(self, key: str) -> bool:
        """A file key that is not part of the network but is known harmless (a text tower beside it)."""
        ...

    def configure(self, shapes: Mapping[str, Sequence[int]]) -> Any: ...

    def build(self, config: Any, device: Any, dtype: torch.dtype | None) -> nn.Module: ...

    def owns(self, module: nn.Module) -> bool: ...

    def encode(
        self, module: nn.Module, pixels: Tensor, device: torch.device, dtype: torch.dtype
    ) -> EncodedImage:
        """Pictures [B, 3, H, W] in [0, 1] (float32) -> their encoding, computed on ``device`` in
        ``dtype`` (the op layers bring streamed weights there)."""
        ...


class ImagePromptAdapter(Protocol):
    """An image-prompt adapter's package (IP-Adapter: a package's ``IMAGE_PROMPT_ADAPTER``): its
    config from a file's shapes, the network, the image projection, each of its cross-attention
    layers' keys and values, and the diffusion network's attention sites they go to, in order."""

    @property
    def id(self) -> str: ...

    def configure(self, shapes: Mapping[str, Sequence[int]]) -> Any: ...

    def build(self, config: Any, device: Any, dtype: torch.dtype | None) -> nn.Module: ...

    def project(self, module: nn.Module, embeds: Tensor) -> Tensor: ...

    def project_face_plus(
        self, module: nn.Module, face: Tensor, clip: Tensor, scale: float, shortcut: bool
    ) -> Tensor: ...

    def key_value(self, module: nn.Module, layer: int, tokens: Tensor) -> tuple[Tensor, Tensor]: ...

    def layers(self, module: nn.Module) -> int: ...

    def sites(self, network: nn.Module) -> tuple[tuple[Site, int], ...]: ...

    def transformers(self, module: nn.Module) -> int:
        """How many UNet transformers its weight types number (ComfyUI_IPAdapter_plus: 11 for SDXL,
        16 for SD1.5)."""
        ...


@dataclass(frozen=True)
class StyleModelArchitecture:
    """How a style model family (FLUX Redux: ``id`` ``flux``, the LoRA group of the models it
    fits) is built from its file and turns an image encoder's last hidden state into prompt tokens
    (``tokens``: ComfyUI's ``StyleModel.get_cond``)."""

    id: str
    title: str
    encoder: str  # the image encoder family whose hidden state it reads
    configure: Callable[[Mapping[str, Sequence[int]]], Any]
    build: Callable[[Any, torch.device | str | None, torch.dtype | None], nn.Module]
    module_type: type[nn.Module]

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, self.module_type)

    def tokens(
        self, module: nn.Module, hidden: Tensor, *, device: torch.device, dtype: torch.dtype
    ) -> Tensor:
        """``[B, tokens, encoder width]`` -> ``[B, tokens, context width]`` computed on ``device`` in
        ``dtype`` (the op layers bring streamed weights there), in float32."""
        out: Tensor = module(hidden.to(device=device, dtype=dtype))
        return out.float()
