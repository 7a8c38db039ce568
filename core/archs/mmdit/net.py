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
from core.archs.memory import CPU_MEASURED, Coefficients, MemoryModel, Profile, fitted_on_cpu
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

#: the text tokens of SD3's conditioning (77 CLIP + 77 T5), what the memory models and the test run count
TEXT_TOKENS = 154


def mmdit_coefficients(config: MMDiTConfig) -> Coefficients:
    """A joint block's activation peak, derived from its shapes and measured to the byte by
    ``bench/inference_memory.py`` (docs/benchmarks.md), in numbers of the width per token: a stream
    at its MLP holds its input and output residuals, the normed input, its part of the joint
    attention's output, the modulated MLP input, fc1's and GELU's outputs (2 x mlp_ratio) and its
    q, k and v (3, and 2 more for SD3.5's normed q and k: the fused projection stays alive through
    v); SD3.5 medium's picture-only second attention keeps its own q, k and v through the MLP too.
    The other stream waits beside it: its residual, normed input, q, k, v and attention output
    (the picture's new residual besides). Per sample: the modulation vectors (6 per stream, 9 with
    the second attention, and the conditioning vector) and the timestep's one number. With more
    picture tokens than text (above ~200 px) the picture's MLP is the peak, below it the text's:
    the second peak."""
    d = config.hidden_size
    qkv = 3 + (2 if config.qk_norm else 0)
    at_mlp = 5 + 2 * config.mlp_ratio + qkv
    picture = at_mlp + (qkv if config.dual_attention_layers else 0)
    mods = 13 + (3 if config.dual_attention_layers else 0)
    return Coefficients(
        picture * d,
        ((3 + qkv) * TEXT_TOKENS + mods) * d + 1,
        measured=CPU_MEASURED.format("64 to 1024 px, 2 joint blocks at the released widths"),
        other_peak=((4 + qkv) * d, (at_mlp * TEXT_TOKENS + mods) * d + 1),
    )


def _model(name: str, config: MMDiTConfig) -> MemoryModel:
    profile = Profile(name, 16, 16, TEXT_TOKENS, config.num_heads, 1024, config.hidden_size)
    return fitted_on_cpu(profile, mmdit_coefficients(config))


#: one per preset, named as the preset (a family record's ``memory_profile``); SD3.5 medium's
#: dual-attention blocks are its peak
_TITLES = {"sd3_medium": "SD3 medium", "sd35_medium": "SD3.5 medium", "sd35_large": "SD3.5 large"}
MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {name: _model(f"{_TITLES[name]} MMDiT", preset()) for name, preset in PRESETS.items()}
)


class MMDiTNet:
    """SD3's MMDiT takes ``(x, t, context, y)`` like the UNet."""

    id = "mmdit"
    architecture = ARCHITECTURE
    calling = CallingConvention(name="mmdit", text_tokens=TEXT_TOKENS, unit_timestep=1000.0)
    memory = MEMORY

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
