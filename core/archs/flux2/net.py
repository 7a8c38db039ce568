"""FLUX.2 (klein 4B / 9B, dev) as a :class:`~core.archs.protocols.DiffusionNet`: each latent pixel
of the FLUX.2 VAE's 128-channel (2x2-packed) latent is a token, with four-axis position ids, the
text encoder's stacked hidden states as the context and (dev) the distilled guidance, as ComfyUI's
``Flux2`` model class calls it (timestep = sigma: the records' multiplier is 1). Reference pictures
(``Conditioning.references``, multi-reference editing) are more tokens after the picture's, each
at its own time-axis index (10, 20, ...: ComfyUI's "index" method), rows and columns from 0; the
prediction is the picture's tokens only."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, cast

import torch
from torch import Tensor, nn

from core.archs.conditioning import Conditioning
from core.archs.flux2.keys import diffusers_to_original, flux2_key_map
from core.archs.keymaps import KeyMapping
from core.archs.layouts import Architecture
from core.archs.memory import CPU_MEASURED, Coefficients, MemoryModel, Profile, fitted_on_cpu
from core.archs.protocols import CallingConvention, StandIn
from core.detect.catalog import REGISTRY
from core.models.flux2 import Flux2, Flux2Config, image_ids, image_latent, image_tokens, text_ids
from core.models.patches import NetworkPatches

#: ComfyUI's guidance for FLUX.2 dev when no FluxGuidance node sets one (its templates' 4)
FLUX2_DEFAULT_GUIDANCE: Final = 4.0
#: the text tokens ComfyUI's klein tokenizer pads every prompt to (its ``min_length``)
TEXT_TOKENS: Final = 512
#: the time-axis position of reference picture ``i`` (1, 2, ...) is ``i`` times this (ComfyUI's
#: ``ref_index_scale`` with its "index" method for FLUX.2; diffusers' ``scale`` of the image ids)
REFERENCE_INDEX_STEP: Final = 10.0

ARCHITECTURE = Architecture(
    "flux2",
    "diffusion_model",
    tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "flux2"),
    configure=lambda shapes, family: Flux2Config.from_shapes(shapes),
    build=lambda cfg, device, dtype: Flux2(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: diffusers_to_original(t)},
)


def flux2_coefficients(hidden: int, heads: int) -> Coefficients:
    """Measured by the tracker (tests/core/memory/test_flux2_memory.py) on narrower networks of
    the released ratios (128-wide heads, MLP ratio 3; 512 and 1024 wide): 21.25 numbers of the
    width per token of the joint sequence (text + image), the peak in a block's fused projections,
    plus the rotary angles and the attention's log-sum-exp counted twice (2-byte elements); 1-2 %
    above what the tracker sees. The 512 text tokens are the constant."""
    per_token = 21.25 * hidden + 2 * (hidden // heads + heads)
    return Coefficients(
        per_token,
        per_token * TEXT_TOKENS,
        measured=CPU_MEASURED.format("64 and 256 px, 512- and 1024-wide networks of FLUX.2's ratios"),
    )


def _model(name: str, cfg: Flux2Config) -> MemoryModel:
    profile = Profile(name, 16, 16, TEXT_TOKENS, cfg.num_heads, 1024, cfg.hidden_size)
    return fitted_on_cpu(profile, flux2_coefficients(cfg.hidden_size, cfg.num_heads))


MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {
        "flux2-klein-4b": _model("FLUX.2 klein 4B transformer", Flux2Config.klein_4b()),
        "flux2-klein-9b": _model("FLUX.2 klein 9B transformer", Flux2Config.klein_9b()),
        "flux2-dev": _model("FLUX.2 dev transformer", Flux2Config.dev()),
    }
)


class Flux2Net:
    id = "flux2"
    architecture = ARCHITECTURE
    calling = CallingConvention(
        name="flux2", text_tokens=TEXT_TOKENS, unit_timestep=1.0, latent_stride=16, references=True
    )
    memory = MEMORY

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, Flux2)

    def width(self, config: Any) -> int | None:
        return int(config.hidden_size)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        return flux2_key_map(config.depth, config.depth_single_blocks, config.guidance_embed)

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        b, _, h, w = x.shape
        guidance = None
        if cast(Flux2, model).config.guidance_embed:
            guidance = cond.guidance
            if guidance is None:
                guidance = torch.full((b,), FLUX2_DEFAULT_GUIDANCE)
            guidance = guidance.to(device=x.device, dtype=torch.float32)
        tokens, img_ids = image_tokens(x), image_ids(b, h, w, device=x.device)
        for i, ref in enumerate(cond.references, start=1):  # extra tokens at time 10, 20, ...
            rh, rw = ref.shape[-2], ref.shape[-1]
            ref_ids = image_ids(b, rh, rw, index=REFERENCE_INDEX_STEP * i, device=x.device)
            tokens = torch.cat((tokens, image_tokens(ref.to(x.dtype))), dim=1)
            img_ids = torch.cat((img_ids, ref_ids), dim=1)
        txt_ids = text_ids(b, cond.context.shape[1], device=x.device)
        out: Tensor = model(tokens, img_ids, cond.context, txt_ids, t, guidance, patches=patches)
        return image_latent(out[:, : h * w], h, w)

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        context = torch.randn(batch, self.calling.text_tokens, config.context_in_dim, generator=generator)
        guidance = torch.full((batch,), FLUX2_DEFAULT_GUIDANCE) if config.guidance_embed else None
        return StandIn(config.out_channels, config.in_channels, context, None, guidance)


NET = Flux2Net()
