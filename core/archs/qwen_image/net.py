"""Qwen-Image's MMDiT as a :class:`~core.archs.protocols.DiffusionNet`: ``(x, t, context)`` with
ComfyUI's flow timestep (sigma itself: the record's multiplier is 1) and Qwen2.5-VL's last hidden
states (the template's tokens dropped, unpadded, no mask: ComfyUI's network attends to every
text token it is given). Reference latents (Qwen-Image-Edit's, ``Conditioning.references``) are
extra picture tokens (ComfyUI's ``ref_latents``); Edit 2511's are modulated as at timestep 0.

File layouts: Qwen-Image was released in diffusers' naming and Comfy-Org's repacks
(``qwen_image_fp8_e4m3fn.safetensors``, ``qwen_image_bf16.safetensors``, 2512, Edit 2509/2511) and
city96's GGUFs keep it, so the module is built in those names and every layout loads as it is
(no key map; ``model.diffusion_model.`` prefixes are the loader's). LoRAs in diffusers/PEFT names
(``transformer.transformer_blocks.0.attn.to_q``) land on the module's own keys, kohya-style ones
(``lora_unet_transformer_blocks_0_attn_to_q``) on the same keys with dots as underscores.
"""

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
from core.archs.protocols import CallingConvention, StandIn
from core.detect.catalog import REGISTRY
from core.models.patches import NetworkPatches
from core.models.qwen_image import QwenImageConfig, QwenImageDiT

#: the network preset of the families whose reference pictures are modulated as at timestep 0
#: (ComfyUI's ``index_timestep_zero`` reference method, which its Edit 2511 template sets;
#: diffusers' ``zero_cond_t``): the family record says it
ZERO_TIMESTEP = "index_timestep_zero"


def _zero_timestep(family: str) -> bool:
    fam = REGISTRY.get(family)
    return fam is not None and fam.network_preset == ZERO_TIMESTEP


ARCHITECTURE = Architecture(
    "qwen_image",
    "diffusion_model",
    tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "qwen_image"),
    configure=lambda shapes, family: QwenImageConfig.from_shapes(shapes, _zero_timestep(family)),
    build=lambda cfg, device, dtype: QwenImageDiT(cfg, device=device, dtype=dtype),
    # Comfy-Org's Edit 2511 marker (an empty tensor): the family says what it says
    harmless=frozenset({"__index_timestep_zero__"}),
)

#: the text tokens the memory model and the test run count (a long prompt after the template drop)
TEXT_TOKENS = 256


def qwen_image_coefficients(dim: int, mlp: int, head_dim: int) -> Coefficients:
    """Derived from the shapes and measured by the tracker (tests/core/memory). Per token, a
    stream's GELU MLP holds the block's input, the stream after attention and its modulated copy
    (3 D) and the projection's and the GELU's outputs (2 F); the rotary angles are head_dim float32
    numbers per token, counted twice (2-byte elements). Where the picture has more tokens than the
    text, the image MLP is the peak, the text streams (2 D per token) beside it; the joint attention
    (about 8 D per token of text and image) peaks between the two MLPs where the image has about as
    many tokens as the text: the constant's 6 D per text token covers it. Below that, the text MLP is
    the peak, the image streams (3 D per token) beside it: the second peak."""
    per_token = 3 * dim + 2 * mlp + 2 * head_dim
    return Coefficients(
        float(per_token),
        float((6 * dim + 2 * head_dim) * TEXT_TOKENS),
        measured=CPU_MEASURED.format("64 to 512 px, narrower networks of the same ratios"),
        other_peak=(float(3 * dim + 2 * head_dim), float(per_token * TEXT_TOKENS)),
    )


MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {
        "qwen-image": fitted_on_cpu(
            Profile("Qwen-Image MMDiT", 16, 16, TEXT_TOKENS, 24, 1328, 3072),
            qwen_image_coefficients(3072, 12288, 128),
        )
    }
)


class QwenImageNet:
    id = "qwen_image"
    architecture = ARCHITECTURE
    calling = CallingConvention(
        name="qwen_image", packed=True, text_tokens=TEXT_TOKENS, unit_timestep=1.0, references=True
    )
    memory = MEMORY

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, QwenImageDiT)

    def width(self, config: Any) -> int | None:
        return int(config.dim)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        """None beyond the module's own: adapters use the released (diffusers) names it has."""
        return ()

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        out: Tensor = model(x, t, cond.context, patches, cond.references)
        return out

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        context = torch.randn(batch, self.calling.text_tokens, config.context_dim, generator=generator)
        return StandIn(config.latent_channels, config.latent_channels, context)


NET = QwenImageNet()
