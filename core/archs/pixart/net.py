"""PixArt-α and PixArt-Σ as a :class:`~core.archs.protocols.DiffusionNet`: ``(x, t, context)``
(T5 tokens, no mask, as ComfyUI gives them); α's size micro-conditions are read from the latent by
the network itself."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn

from core.archs.conditioning import Conditioning
from core.archs.keymaps import KeyMapping
from core.archs.layouts import Architecture
from core.archs.memory import CPU_MEASURED, Coefficients, MemoryModel, Profile, fitted_on_cpu
from core.archs.pixart.keys import pixart_diffusers_to_original, pixart_key_map
from core.archs.pixart.network import PixArt, PixArtConfig
from core.archs.protocols import CallingConvention, StandIn
from core.detect.catalog import REGISTRY
from core.models.patches import NetworkPatches

ARCHITECTURE = Architecture(
    "pixart",
    "diffusion_model",
    tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "pixart"),
    configure=lambda shapes, family: PixArtConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: PixArt(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: pixart_diffusers_to_original(t)},
)

_D, _L = 1152, 300  # every released PixArt's width; the T5 tokens it is trained at
#: PixArt: derived from its shapes (D wide, L T5 tokens, N image tokens) and measured exactly by
#: the tracker at 64..1024 px (docs/benchmarks.md). The peak is in the MLP: 11 D per token (fc1's
#: and the GELU's 4 D each, the MLP's input, the block's input and its residual) plus the
#: projected caption (L D), the timestep's t, t6 and a block's six modulations (13 D) and the
#: scalar timestep (counted as a 14th row); below ~150 px it is the cross-attention's: 4 D per
#: token plus the caption, its keys and values (3 L D) and the same 14 rows. PixArt attends to its
#: T5 tokens in a separate cross-attention: no joint text tokens.
MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {
        "pixart": fitted_on_cpu(
            Profile("PixArt transformer", 16, 16, 0, 16, 1024, _D),
            Coefficients(
                11 * _D,
                (_L + 14) * _D,
                measured=CPU_MEASURED.format("64..1024 px"),
                other_peak=(4 * _D, (3 * _L + 14) * _D),
            ),
        )
    }
)


class PixArtNet:
    id = "pixart"
    architecture = ARCHITECTURE
    calling = CallingConvention(name="pixart", text_tokens=300, unit_timestep=999.0)
    memory = MEMORY

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, PixArt)

    def width(self, config: Any) -> int | None:
        return int(config.hidden_size)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        return pixart_key_map(config.depth, micro_condition=config.micro_condition)

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        out: Tensor = model(x, t, cond.context, patches=patches)
        return out

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        context = torch.randn(batch, self.calling.text_tokens, config.context_dim, generator=generator)
        return StandIn(config.out_channels, config.in_channels, context)


NET = PixArtNet()
