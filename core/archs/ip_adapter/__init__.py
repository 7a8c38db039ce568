"""IP-Adapter (kind ``ip_adapter``, SD1.5 and SDXL): its network (``network.py``: the image
projection and the per-layer keys and values) and where its layers go in the UNet (``sites.py``).
The patch that applies it is ``core/generate/ip_adapter.py``'s; shared code reaches this package
through ``core.archs.catalog.IMAGE_PROMPT_ADAPTERS``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from core.archs.ip_adapter.network import IpAdapterConfig, IpAdapterModel, config_from_shapes
from core.archs.ip_adapter.sites import cross_attention_order
from core.models.patches import Site

#: SDXL's text context width, and the UNet transformers (SpatialTransformers) SDXL and SD1.5 have
SDXL_CONTEXT, SDXL_TRANSFORMERS, SD1_TRANSFORMERS = 2048, 11, 16


@dataclass(frozen=True)
class IpAdapterArchitecture:
    id: str = "ip-adapter"

    def configure(self, shapes: Mapping[str, Sequence[int]]) -> IpAdapterConfig:
        return config_from_shapes(shapes)

    def build(self, config: Any, device: Any, dtype: torch.dtype | None) -> nn.Module:
        return IpAdapterModel(config, device=device, dtype=dtype)

    def project(self, module: nn.Module, embeds: Tensor) -> Tensor:
        assert isinstance(module, IpAdapterModel)
        return module.project(embeds)

    def project_face_plus(
        self, module: nn.Module, face: Tensor, clip: Tensor, scale: float, shortcut: bool
    ) -> Tensor:
        assert isinstance(module, IpAdapterModel)
        return module.project_face_plus(face, clip, scale, shortcut)

    def key_value(self, module: nn.Module, layer: int, tokens: Tensor) -> tuple[Tensor, Tensor]:
        assert isinstance(module, IpAdapterModel)
        return module.key_value(layer, tokens)

    def layers(self, module: nn.Module) -> int:
        assert isinstance(module, IpAdapterModel)
        return len(module.config.layers)

    def sites(self, network: nn.Module) -> tuple[tuple[Site, int], ...]:
        return cross_attention_order(network)

    def transformers(self, module: nn.Module) -> int:
        """ComfyUI_IPAdapter_plus's ``layers`` for the weight types: 11 for an SDXL adapter (its
        keys and values take SDXL's 2048-wide context, the pack's ``is_sdxl``), 16 for SD1.5."""
        assert isinstance(module, IpAdapterModel)
        return SDXL_TRANSFORMERS if module.config.cross_dim == SDXL_CONTEXT else SD1_TRANSFORMERS


IMAGE_PROMPT_ADAPTER = IpAdapterArchitecture()

__all__ = ["IMAGE_PROMPT_ADAPTER", "IpAdapterConfig", "IpAdapterModel", "config_from_shapes"]
