"""The SD-family UNet (SD1.x, SD2.x, SDXL, the SDXL refiner, SSD-1B, Segmind Vega) as a
:class:`~core.archs.protocols.DiffusionNet`: built from the file's shapes, its diffusers layout,
its forward, stand-ins and memory models."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn

from core.archs.conditioning import Conditioning
from core.archs.keymaps import KeyMapping
from core.archs.layouts import Architecture, Tensors
from core.archs.memory import CPU_MEASURED, Coefficients, MemoryModel, Profile, fitted_on_cpu
from core.archs.protocols import CallingConvention, StandIn
from core.archs.unet.keys import unet_diffusers_to_original, unet_original_key_map
from core.detect.catalog import REGISTRY
from core.models.patches import NetworkPatches
from core.models.unet import ResStage, UNetConfig, UNetModel

#: UNet presets by name (a family's ``unet_preset``), given the input channels (inpaint: 9)
PRESETS: Mapping[str, Callable[[int], UNetConfig]] = MappingProxyType(
    {
        "sd1": lambda c: UNetConfig.sd1(in_channels=c),
        "sd2": lambda c: UNetConfig.sd2(in_channels=c),
        "sdxl": lambda c: UNetConfig.sdxl(in_channels=c),
        "sdxl_refiner": lambda c: UNetConfig.sdxl_refiner(),
        "ssd_1b": lambda c: UNetConfig.ssd_1b(),
        "segmind_vega": lambda c: UNetConfig.segmind_vega(),
    }
)


def _from_diffusers(t: Tensors, family: str) -> Tensors:
    in_ch = t["conv_in.weight"].shape[1] if "conv_in.weight" in t else 4
    fam = REGISTRY.get(family)
    assert fam is not None and fam.unet_preset, f"{family} is not a UNet family"
    return unet_diffusers_to_original(t, PRESETS[fam.unet_preset](in_ch))


def _consistency(cfg: UNetConfig) -> str:
    """Every SD-family UNet (SSD-1B and Vega included) has attention in all ResBlocks of a level
    or in none; a level where only some have it lost a transformer block."""
    sides = (("input_blocks", cfg.input_stages(), 1), ("output_blocks", cfg.output_stages(), 0))
    for name, stages, first in sides:
        by_level: dict[int, list[tuple[int, bool]]] = {}
        for i, st in enumerate(stages, start=first):
            if isinstance(st, ResStage):
                by_level.setdefault(st.level, []).append((i, st.transformer_depth > 0))
        for blocks in by_level.values():
            with_attn = [i for i, has in blocks if has]
            without = [i for i, has in blocks if not has]
            if with_attn and without:
                return (
                    f"{name}.{without[0]}.* is missing its attention (transformer) weights, which "
                    f"{name}.{with_attn[0]}.* of the same resolution has"
                )
    return ""


def _families() -> tuple[str, ...]:
    return tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "unet")


ARCHITECTURE = Architecture(
    "unet",
    "diffusion_model",
    _families(),
    configure=lambda shapes, family: UNetConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: UNetModel(cfg, device=device, dtype=dtype),
    to_module={"diffusers": _from_diffusers},
    consistency=lambda cfg: _consistency(cfg),
)

_CPU_FIT = CPU_MEASURED.format("128/192/256 px")
#: fitted by ``bench/inference_memory.py --fit`` (docs/benchmarks.md)
MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {
        "sd1": fitted_on_cpu(
            Profile("SD1.x UNet", 8, 8, 0, 8, 512, 320), Coefficients(8000.0, 1281.0, measured=_CPU_FIT)
        ),
        "sd2": fitted_on_cpu(
            Profile("SD2.x UNet", 8, 8, 0, 5, 768, 320), Coefficients(8320.0, 1281.0, measured=_CPU_FIT)
        ),
        "sdxl": fitted_on_cpu(
            Profile("SDXL UNet", 8, 16, 0, 10, 1024, 320), Coefficients(4880.0, 1281.0, measured=_CPU_FIT)
        ),
        "sdxl_distilled": fitted_on_cpu(
            Profile("SSD-1B / Vega UNet", 8, 16, 0, 10, 1024, 320),
            Coefficients(5040.0, 1281.0, measured=_CPU_FIT),
        ),
        "sdxl_refiner": fitted_on_cpu(
            Profile("SDXL refiner UNet", 8, 16, 0, 12, 1024, 384),
            Coefficients(6048.0, 1537.0, measured=_CPU_FIT),
        ),
    }
)


class UNetNet:
    """The UNet takes ``(x, t, context, y)``; ControlNet residuals go to its skips and middle block."""

    id = "unet"
    architecture = ARCHITECTURE
    calling = CallingConvention(name="unet", text_tokens=77, unit_timestep=999.0)
    memory = MEMORY

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, UNetModel)

    def width(self, config: Any) -> int | None:
        return int(config.model_channels)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        return (
            KeyMapping(original, (diffusers,))
            for diffusers, original in unet_original_key_map(config).items()
        )

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


NET = UNetNet()
