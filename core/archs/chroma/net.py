"""Chroma as a :class:`~core.archs.protocols.DiffusionNet`: Flux's token layout without the pooled
vector; the guidance input is 0 unless one is given (ComfyUI's Chroma); T5's text mask, when the
conditioning has one, masks the text tokens."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor, nn

from core.archs.chroma.keys import chroma_diffusers_to_original, chroma_key_map
from core.archs.conditioning import Conditioning
from core.archs.flux.net import packed_stand_in, token_ids
from core.archs.keymaps import KeyMapping
from core.archs.layouts import Architecture
from core.archs.memory import CPU_MEASURED, Coefficients, MemoryModel, Profile, fitted_on_cpu
from core.archs.protocols import CallingConvention, StandIn
from core.detect.catalog import REGISTRY
from core.models.chroma import Chroma, ChromaConfig
from core.models.flux import pack_latents, unpack_latents
from core.models.patches import NetworkPatches

ARCHITECTURE = Architecture(
    "chroma",
    "diffusion_model",
    tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "chroma"),
    configure=lambda shapes, family: ChromaConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: Chroma(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: chroma_diffusers_to_original(t, ChromaConfig())},
)

#: per token of the joint sequence (image and 512 text tokens): Flux's blocks, measured to the byte
_PER_TOKEN = 64_707
#: per sample at one double and one single block (17 modulation slots), measured
_CONSTANT_1_1 = 33_149_441


def chroma_coefficients(config: ChromaConfig) -> Coefficients:
    """Measured by ``bench/inference_memory.py`` (docs/benchmarks.md) at Chroma's width with 1 + 1
    and 2 + 2 blocks: Flux's per-token peak, and a constant that grows with the depth: the
    approximator's modulation vectors (one width per slot: 12 per double block, 3 per single, 2
    final) stay alive through the whole step, 344 slots at the released depth (Flux makes each
    block's own and frees it)."""
    slots_measured = 3 * 1 + 12 * 1 + 2
    constant = _CONSTANT_1_1 + (config.modulation_slots - slots_measured) * config.hidden_size
    return Coefficients(
        float(_PER_TOKEN),
        float(constant),
        measured=CPU_MEASURED.format("64/128/192 px, 1 + 1 and 2 + 2 blocks"),
    )


MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {
        "chroma": fitted_on_cpu(
            Profile("Chroma transformer", 16, 16, 512, 24, 1024, 3072), chroma_coefficients(ChromaConfig())
        )
    }
)


class ChromaNet:
    id = "chroma"
    architecture = ARCHITECTURE
    calling = CallingConvention(name="chroma", packed=True, text_tokens=512, unit_timestep=1.0)
    memory = MEMORY

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, Chroma)

    def width(self, config: Any) -> int | None:
        return int(config.hidden_size)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        return chroma_key_map(config)

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        _, _, h, w = x.shape
        img_ids, txt_ids = token_ids(x, cond)
        guidance = None if cond.guidance is None else cond.guidance.to(device=x.device, dtype=torch.float32)
        tokens = pack_latents(x)
        if cond.mask is not None:
            out: Tensor = model(
                tokens, img_ids, cond.context, txt_ids, t, guidance, txt_mask=cond.mask, patches=patches
            )
        else:
            out = model(tokens, img_ids, cond.context, txt_ids, t, guidance, patches=patches)
        return unpack_latents(out, h, w)

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        return packed_stand_in(config, batch, self.calling.text_tokens, generator, pooled=False)


NET = ChromaNet()
