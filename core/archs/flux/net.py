"""FLUX.1 (dev, schnell, fill, Kontext) as a :class:`~core.archs.protocols.DiffusionNet`: 2x2-patch
tokens with position ids, CLIP-L's pooled vector and (dev, fill, Kontext) the distilled guidance, as
ComfyUI's Flux model class calls it. Reference pictures (``Conditioning.references``: Kontext) are
more tokens after the picture's, at index 1 and placed by ComfyUI's "offset" method
(:func:`core.models.flux.reference_tokens`); the prediction is the picture's tokens only."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Final

import torch
from torch import Tensor, nn

from core.archs.conditioning import Conditioning
from core.archs.flux.keys import flux_diffusers_to_original, flux_key_map
from core.archs.keymaps import KeyMapping
from core.archs.layouts import Architecture
from core.archs.memory import CPU_MEASURED, Coefficients, MemoryModel, Profile, fitted_on_cpu
from core.archs.protocols import CallingConvention, InpaintChannels, StandIn
from core.detect.catalog import REGISTRY
from core.errors import ModelMismatchError
from core.models.flux import (
    Flux,
    FluxConfig,
    count_blocks,
    make_img_ids,
    make_txt_ids,
    pack_latents,
    reference_tokens,
    unpack_latents,
)
from core.models.patches import NetworkPatches
from core.models.state import get_tensor

#: ComfyUI's guidance when no FluxGuidance node sets one.
FLUX_DEFAULT_GUIDANCE: Final = 3.5

#: configs by name (a family's ``network_preset``): what its diffusers layout converts with
PRESETS: Mapping[str, Callable[[], FluxConfig]] = MappingProxyType(
    {"dev": FluxConfig.dev, "schnell": FluxConfig.schnell, "fill": FluxConfig.fill}
)


def _preset(family: str) -> FluxConfig:
    fam = REGISTRY.get(family)
    assert fam is not None and fam.network_preset, f"{family} has no network preset"
    return PRESETS[fam.network_preset]()


def _diffusers_config(tensors: Mapping[str, Any], family: str) -> FluxConfig:
    """The family's preset with the file's own numbers of double and single blocks (a diffusers
    file's keys name its blocks; its widths convert as they are)."""
    keys = dict.fromkeys(tensors, ())
    return replace(
        _preset(family),
        depth=count_blocks(keys, "transformer_blocks."),
        depth_single_blocks=count_blocks(keys, "single_transformer_blocks."),
    )


ARCHITECTURE = Architecture(
    "flux",
    "diffusion_model",
    tuple(f.id for f in REGISTRY if f.diffusion is not None and f.diffusion.network == "flux"),
    configure=lambda shapes, family: FluxConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: Flux(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: flux_diffusers_to_original(t, _diffusers_config(t, fam))},
)

#: Flux: 64,700 per token of the joint sequence, image (N) and text (512) alike: c = 64,700 * 512
MEMORY: Mapping[str, MemoryModel] = MappingProxyType(
    {
        "flux": fitted_on_cpu(
            Profile("Flux transformer", 16, 16, 512, 24, 1024, 3072),
            Coefficients(64700.0, 33_126_400.0, measured=CPU_MEASURED.format("64/128 px")),
        )
    }
)


def token_ids(x: Tensor, cond: Conditioning) -> tuple[Tensor, Tensor]:
    """The image and text position ids of a Flux-style call on the latent ``x``."""
    b, _, h, w = x.shape
    return make_img_ids(b, h, w, device=x.device), make_txt_ids(b, cond.context.shape[1], device=x.device)


def packed_stand_in(
    config: Any, batch: int, tokens: int, generator: torch.Generator, *, pooled: bool
) -> StandIn:
    """Stand-ins of a 2x2-patch network: the context, the pooled vector (``pooled``), guidance 3.5."""
    context = torch.randn(batch, tokens, config.context_in_dim, generator=generator)
    vec = torch.randn(batch, config.vec_in_dim, generator=generator) if pooled else None
    guidance = (
        torch.full((batch,), FLUX_DEFAULT_GUIDANCE) if getattr(config, "guidance_embed", True) else None
    )
    return StandIn(config.out_channels // 4, config.in_channels // 4, context, vec, guidance)


def _check_inputs(given: int, wanted: int) -> None:
    """Refuse a call with fewer input features than the model's img_in takes (a FLUX.1 Canny/Depth
    model or control LoRA without its control picture, Fill without its mask): in words, not as
    a matrix-shape error."""
    if given < wanted:
        raise ModelMismatchError(
            f"this FLUX.1 model takes {wanted // 4} input channels and was given {given // 4}",
            why="a Canny/Depth model or control LoRA reads a control picture beside the latent, "
            "FLUX.1 Fill a picture and a mask",
            fix="Give the control picture (Canny/Depth) or the picture and mask (Fill)",
            code="missing_conditioning",
        )


class FluxNet:
    id = "flux"
    architecture = ARCHITECTURE
    calling = CallingConvention(
        name="flux", packed=True, text_tokens=512, unit_timestep=1.0, inpaint=InpaintChannels(mask_cell=8),
        references=True,
    )
    memory = MEMORY

    def owns(self, module: nn.Module) -> bool:
        return isinstance(module, Flux)

    def width(self, config: Any) -> int | None:
        return int(config.hidden_size)

    def adapter_keys(self, config: Any) -> Iterable[KeyMapping]:
        return flux_key_map(config)

    def forward(
        self, model: nn.Module, x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches
    ) -> Tensor:
        b, _, h, w = x.shape
        img_ids, txt_ids = token_ids(x, cond)
        guidance = None
        if getattr(model.config, "guidance_embed", False):
            guidance = cond.guidance
            if guidance is None:
                guidance = torch.full((b,), FLUX_DEFAULT_GUIDANCE, device=x.device)
            guidance = guidance.to(device=x.device, dtype=torch.float32)
        if cond.pooled is None:
            raise ModelMismatchError(
                "Flux needs CLIP-L's pooled output, and the conditioning has none",
                fix="Load a CLIP-L text encoder with the Flux model",
                code="missing_conditioning",
            )
        tokens = pack_latents(x)
        _check_inputs(tokens.shape[-1], int(get_tensor(model, "img_in.weight").shape[1]))
        count = tokens.shape[1]
        if cond.references:  # FLUX.1 Kontext: the reference pictures' tokens after the picture's
            extra, extra_ids = reference_tokens(cond.references, b, x.dtype)
            tokens, img_ids = torch.cat((tokens, extra), dim=1), torch.cat((img_ids, extra_ids), dim=1)
        out: Tensor = model(tokens, img_ids, cond.context, txt_ids, t, cond.pooled, guidance, patches=patches)
        return unpack_latents(out[:, :count], h, w)

    def stand_in(self, config: Any, batch: int, generator: torch.Generator) -> StandIn:
        return packed_stand_in(config, batch, self.calling.text_tokens, generator, pooled=True)


NET = FluxNet()
