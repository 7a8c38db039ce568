"""The SD3 / SD3.5 MMDiT as a :class:`~core.archs.protocols.DiffusionNet`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn

from core.archs.conditioning import Conditioning
from core.archs.keymaps import KeyMapping
from core.archs.layouts import Architecture
from core.archs.memory import MemoryModel
from core.archs.mmdit.keys import sd3_diffusers_to_original, sd3_key_map
from core.archs.protocols import CallingConvention, StandIn
from core.detect.catalog import REGISTRY
from core.models.mmdit import MMDiT, MMDiTConfig
from core.models.patches import NetworkPatches

#: configs by name (a family's ``network_preset``): what its diffusers layout converts with
PRESETS: Mapping[str, Callable[[], MMDiTConfig]] = MappingProxyType(
    {
        "sd3_medium": MMDiTConfig.sd3_medium,
        "sd35_medium": MMDiTConfig.sd35_medium,
        "sd35_large": MMDiTConfig.sd35_large,
    }
)


def _preset(family: str) -> MMDiTConfig:
    fam = REGISTRY.get(family)
    assert fam is not None and fam.network_preset, f"{family} has no network preset"
    return PRESETS[fam.network_preset]()


ARCHITECTURE = Architecture(
    "mmdit",
    "diffusion_model",
    tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "mmdit"),
    configure=lambda shapes, family: MMDiTConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: MMDiT(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: sd3_diffusers_to_original(t, _preset(fam))},
)


class MMDiTNet:
    """SD3's MMDiT takes ``(x, t, context, y)`` like the UNet; no memory model is measured yet."""

    id = "mmdit"
    architecture = ARCHITECTURE
    calling = CallingConvention(name="mmdit", text_tokens=154, unit_timestep=1000.0)
    memory: Mapping[str, MemoryModel] = MappingProxyType({})

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, MMDiT)

    def width(self, config: Any) -> int | None:
        return int(config.hidden_size)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        return sd3_key_map(config)

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        out: Tensor = model(x, t, cond.context, cond.pooled, patches=patches)
        return out

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        tokens = self.calling.text_tokens
        context = (
            torch.randn(batch, tokens, config.context_dim, generator=generator)
            if config.context_dim
            else None
        )
        adm = config.adm_in_channels
        pooled = torch.randn(batch, adm, generator=generator) if adm else None
        return StandIn(config.out_channels, config.in_channels, context, pooled)


NET = MMDiTNet()
