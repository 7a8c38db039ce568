"""The CLIP vision tower's record for the catalog (an ``ImageEncoderArchitecture``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from core.archs.clip_vision.keys import open_clip_sources, transformers_sources
from core.archs.clip_vision.network import CLIPVisionConfig, CLIPVisionModel, config_from_shapes
from core.archs.clip_vision.preprocess import clip_preprocess
from core.archs.image_encoders import EncodedImage, TensorSource

#: keys of a file that are not the vision tower: the old position-id buffer, and anything outside
#: the tower (a whole CLIPModel's or open_clip dump's text side, ``logit_scale``)
_OTHER = ("vision_model.embeddings.position_ids",)
_TOWER = ("vision_model.", "visual_projection.", "visual.")


@dataclass(frozen=True)
class ClipVisionArchitecture:
    id: str = "clip-vision"
    families: tuple[str, ...] = ("clip-vit-h", "clip-vit-bigg", "clip-vit-l")

    def sources(self, shapes: Mapping[str, Sequence[int]], layout: str) -> dict[str, TensorSource]:
        found = open_clip_sources(shapes) if layout == "open_clip" else transformers_sources(shapes)
        return {k: v for k, v in found.items() if not self.ignored(k)}

    def ignored(self, key: str) -> bool:
        return key.startswith(_OTHER) or not key.startswith(_TOWER)

    def configure(self, shapes: Mapping[str, Sequence[int]]) -> CLIPVisionConfig:
        return config_from_shapes(shapes)

    def build(self, config: Any, device: Any, dtype: torch.dtype | None) -> nn.Module:
        return CLIPVisionModel(config, device=device, dtype=dtype)

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, CLIPVisionModel)

    def encode(
        self, module: nn.Module, pixels: Tensor, device: torch.device, dtype: torch.dtype
    ) -> EncodedImage:
        assert isinstance(module, CLIPVisionModel)
        normed = clip_preprocess(pixels.float(), module.config.image_size).to(device, dtype)
        out = module(normed)
        return EncodedImage(out.last_hidden_state, out.penultimate, out.image_embeds)


CLIP_VISION = ClipVisionArchitecture()
