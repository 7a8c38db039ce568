"""SigLIP so400m's record for the catalog (an ``ImageEncoderArchitecture``): its file is in the
transformers layout (ComfyUI's too), the attention-pooling head is known and not loaded, and its
pictures are prepared by ComfyUI's ``clip_preprocess`` at 384 pixels with SigLIP's mean and std
(0.5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from core.archs.image_encoders import EncodedImage, FileTensor, TensorSource, clip_preprocess
from core.archs.siglip.network import PREFIX, SiglipVision, SiglipVisionConfig

#: keys of the attention-pooling head the released files carry; ComfyUI never loads them
HEAD = f"{PREFIX}head."


@dataclass(frozen=True)
class SiglipArchitecture:
    id: str = "siglip-so400m"
    families: tuple[str, ...] = ("siglip-so400m",)
    title: str = "SigLIP so400m (patch 14, 384)"
    size: int = 384
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    def sources(self, shapes: Mapping[str, Sequence[int]], layout: str) -> dict[str, TensorSource]:
        return {k: FileTensor(k) for k in shapes if not self.ignored(k)}

    def ignored(self, key: str) -> bool:
        return key.startswith(HEAD)

    def configure(self, shapes: Mapping[str, Sequence[int]]) -> SiglipVisionConfig:
        return SiglipVisionConfig.from_shapes(shapes)

    def build(self, config: Any, device: Any, dtype: torch.dtype | None) -> nn.Module:
        return SiglipVision(config, device=device, dtype=dtype)

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, SiglipVision)

    def encode(
        self, module: nn.Module, pixels: Tensor, device: torch.device, dtype: torch.dtype
    ) -> EncodedImage:
        """ComfyUI's ``CLIPVisionEncode`` (centre crop) of a SigLIP tower: the last hidden state is
        post-normed, and ``image_embeds`` is that same sequence (SigLIP's file has no projection,
        and ComfyUI's pooled output of a SigLIP tower is the normed sequence)."""
        assert isinstance(module, SiglipVision)
        ready = clip_preprocess(pixels.float(), self.size, self.mean, self.std).to(device, dtype)
        last, penultimate = module.hidden_states(ready)
        return EncodedImage(last, penultimate, last)


SIGLIP_SO400M = SiglipArchitecture()
