"""What an image encoder's package gives (kind ``image_encoder``: the vision towers image prompts
read, in ComfyUI's ``models/clip_vision``): the transformers-layout tensors its file layouts hold,
the config and the network built from them, and the encoding of a picture as the prompt feature
reads it. A package exports ``IMAGE_ENCODER``; ``core.archs.catalog.image_encoder_for(family)``
finds it by one of its ``families``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from core.models.patches import Site


@dataclass(frozen=True)
class EncodedImage:
    """One encoding of a batch of pictures: the last layer's tokens (before the final norm), the
    penultimate layer's tokens and the pooled, projected embedding (``image_embeds``)."""

    last_hidden_state: Tensor
    penultimate: Tensor
    image_embeds: Tensor


class TensorSource(Protocol):
    """Where one tensor of the network is in the file, and its shape there."""

    def read(self, get: Callable[[str], torch.Tensor]) -> torch.Tensor: ...

    def shape(self, shapes: Mapping[str, Sequence[int]]) -> tuple[int, ...]: ...


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

    def key_value(self, module: nn.Module, layer: int, tokens: Tensor) -> tuple[Tensor, Tensor]: ...

    def layers(self, module: nn.Module) -> int: ...

    def sites(self, network: nn.Module) -> tuple[tuple[Site, int], ...]: ...
