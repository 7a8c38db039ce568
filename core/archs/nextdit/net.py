"""Next-DiT (Lumina 2 / NetaYume, Z-Image Turbo and Base) as a
:class:`~core.archs.protocols.DiffusionNet`: ``(x, t, context)`` with ComfyUI's flow timestep
(sigma itself: the records' multiplier is 1) and the text encoder's hidden states, unpadded and
unmasked, as ComfyUI gives them."""

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
from core.archs.nextdit.keys import HARMLESS, diffusers_to_original, lumina2_key_map, z_image_key_map
from core.archs.protocols import CallingConvention, StandIn
from core.detect.catalog import REGISTRY
from core.models.nextdit import NextDiT, NextDiTConfig
from core.models.patches import NetworkPatches

ARCHITECTURE = Architecture(
    "nextdit",
    "diffusion_model",
    tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "nextdit"),
    configure=lambda shapes, family: NextDiTConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: NextDiT(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: diffusers_to_original(t)},
    harmless=HARMLESS,
)

#: the caption tokens the memory models and the test run count (a long prompt in its template)
CAPTION_TOKENS = 256


def next_dit_coefficients(dim: int, ffn: int, heads: int, pad_slack: int) -> Coefficients:
    """Derived from the shapes and measured by the tracker (tests/core/memory): the peak is a
    joint block's SwiGLU, per token of the joint sequence (caption + image) the block's input, the
    residual, the normed and scaled input (3 D) and w1's, SiLU's and w3's outputs (3 F); the
    rotary angles (head_dim float32 numbers) and the attention's log-sum-exp (one float32 per
    head) are counted twice (2-byte elements). The caption and Z-Image's pads (up to 31 tokens)
    are the constant."""
    per_token = 3 * dim + 3 * ffn + 2 * (dim // heads + heads)
    return Coefficients(
        float(per_token),
        float(per_token * (CAPTION_TOKENS + pad_slack)),
        measured=CPU_MEASURED.format("64 and 256 px, narrower networks of each form"),
    )


MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {
        "z-image": fitted_on_cpu(
            Profile("Z-Image Next-DiT", 16, 16, CAPTION_TOKENS, 30, 1024, 3840),
            next_dit_coefficients(3840, 10240, 30, 31),
        ),
        "lumina2": fitted_on_cpu(
            Profile("Lumina 2 Next-DiT", 16, 16, CAPTION_TOKENS, 24, 1024, 2304),
            next_dit_coefficients(2304, 9216, 24, 0),
        ),
    }
)


class NextDiTNet:
    id = "nextdit"
    architecture = ARCHITECTURE
    calling = CallingConvention(name="nextdit", text_tokens=CAPTION_TOKENS, unit_timestep=1.0)
    memory = MEMORY

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, NextDiT)

    def width(self, config: Any) -> int | None:
        return int(config.dim)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        """diffusers/PEFT names: Z-Image's (``attention.to_q`` ...) or Lumina 2's (``attn.to_q`` ...)."""
        if config.z_image:
            return z_image_key_map(config.n_layers, config.n_refiner_layers)
        return lumina2_key_map(config.n_layers, config.n_refiner_layers)

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        out: Tensor = model(x, t, cond.context, patches)
        return out

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        context = torch.randn(batch, self.calling.text_tokens, config.cap_feat_dim, generator=generator)
        return StandIn(config.in_channels, config.in_channels, context)


NET = NextDiTNet()
