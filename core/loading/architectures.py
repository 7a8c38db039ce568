"""Which network each family is, and how a file's keys become that network's keys.

One :class:`Architecture` per network, covering the families that share it. Conversions are
functions over a *mapping of tensors*: the same code converts real memory-mapped tensors when
loading and meta tensors (shapes only, no data) for ``loadout check``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from core.archs.layouts import Architecture as Architecture
from core.archs.llm import LLM_ARCHITECTURE
from core.archs.nextdit.net import ARCHITECTURE as NEXTDIT_ARCHITECTURE
from core.loading.convert.dit_diffusers import (
    chroma_diffusers_to_original,
    flux_diffusers_to_original,
    pixart_diffusers_to_original,
    sd3_diffusers_to_original,
)
from core.loading.convert.open_clip import hf_to_open_clip, open_clip_to_hf
from core.loading.convert.unet_diffusers import unet_diffusers_to_original
from core.loading.convert.vae_diffusers import vae_diffusers_to_original
from core.loading.families import family as family_record
from core.loading.families import network_families, network_preset, unet_families
from core.models.chroma import Chroma, ChromaConfig
from core.models.clip import CLIPTextConfig, CLIPTextModel
from core.models.flux import Flux, FluxConfig
from core.models.mmdit import MMDiT, MMDiTConfig
from core.models.pixart import PixArt, PixArtConfig
from core.models.t5 import T5Config, T5Encoder
from core.models.unet import ResStage, UNetConfig, UNetModel
from core.models.vae import AutoencoderKL, VAEConfig, latent_format_for

Tensors = Mapping[str, torch.Tensor]
Shapes = dict[str, tuple[int, ...]]
#: file layout -> module layout, given the family (conversions may need a preset config)
Converter = Callable[[Tensors, str], Tensors]


def _shapes(t: Tensors) -> Shapes:
    return {k: tuple(v.shape) for k, v in t.items()}


# --- UNet ---------------------------------------------------------------------------------------
#: UNet presets by name (a family's ``unet_preset``), given the input channels (inpaint: 9)
_UNET_PRESETS: dict[str, Callable[[int], UNetConfig]] = {
    "sd1": lambda c: UNetConfig.sd1(in_channels=c),
    "sd2": lambda c: UNetConfig.sd2(in_channels=c),
    "sdxl": lambda c: UNetConfig.sdxl(in_channels=c),
    "sdxl_refiner": lambda c: UNetConfig.sdxl_refiner(),
    "ssd_1b": lambda c: UNetConfig.ssd_1b(),
    "segmind_vega": lambda c: UNetConfig.segmind_vega(),
}


def _unet_from_diffusers(t: Tensors, family: str) -> Tensors:
    in_ch = t["conv_in.weight"].shape[1] if "conv_in.weight" in t else 4
    fam = family_record(family)
    assert fam is not None and fam.unet_preset, f"{family} is not a UNet family"
    return unet_diffusers_to_original(t, _UNET_PRESETS[fam.unet_preset](in_ch))


def _unet_consistency(cfg: UNetConfig) -> str:
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


UNET = Architecture(
    "unet",
    "diffusion_model",
    unet_families(),
    configure=lambda shapes, family: UNetConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: UNetModel(cfg, device=device, dtype=dtype),
    to_module={"diffusers": _unet_from_diffusers},
    consistency=lambda cfg: _unet_consistency(cfg),
)


# --- MMDiT / Flux / Chroma / PixArt --------------------------------------------------------------
def _dit_preset(presets: Mapping[str, Callable[[], Any]], family: str) -> Any:
    """The config a family's diffusers layout converts with (its record's ``network_preset``)."""
    return presets[network_preset(family)]()


#: DiT presets by name (a family's ``network_preset``)
_MMDIT_PRESETS = {
    "sd3_medium": MMDiTConfig.sd3_medium,
    "sd35_medium": MMDiTConfig.sd35_medium,
    "sd35_large": MMDiTConfig.sd35_large,
}
MMDIT = Architecture(
    "mmdit",
    "diffusion_model",
    network_families("mmdit"),
    configure=lambda shapes, family: MMDiTConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: MMDiT(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: sd3_diffusers_to_original(t, _dit_preset(_MMDIT_PRESETS, fam))},
)

_FLUX_PRESETS = {"dev": FluxConfig.dev, "schnell": FluxConfig.schnell, "fill": FluxConfig.fill}
FLUX = Architecture(
    "flux",
    "diffusion_model",
    network_families("flux"),
    configure=lambda shapes, family: FluxConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: Flux(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: flux_diffusers_to_original(t, _dit_preset(_FLUX_PRESETS, fam))},
)

CHROMA = Architecture(
    "chroma",
    "diffusion_model",
    network_families("chroma"),
    configure=lambda shapes, family: ChromaConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: Chroma(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: chroma_diffusers_to_original(t, ChromaConfig())},
)

PIXART = Architecture(
    "pixart",
    "diffusion_model",
    network_families("pixart"),
    configure=lambda shapes, family: PixArtConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: PixArt(cfg, device=device, dtype=dtype),
    to_module={"diffusers": lambda t, fam: pixart_diffusers_to_original(t)},
)

NEXTDIT = NEXTDIT_ARCHITECTURE

# --- VAE ------------------------------------------------------------------------------------------


def _vae_config(shapes: Shapes, family: str) -> VAEConfig:
    fmt = latent_format_for(family) if family in ("vae-sd3",) else None
    return VAEConfig.from_shapes(shapes, latent_format=fmt)


def _vae_from_diffusers(t: Tensors, family: str) -> Tensors:
    latent = t["decoder.conv_in.weight"].shape[1]
    return vae_diffusers_to_original(t, VAEConfig.sd() if latent == 4 else VAEConfig.flux())


VAE = Architecture(
    "kl-vae",
    "vae",
    ("vae-sd", "vae-flux", "vae-sd3"),
    configure=_vae_config,
    build=lambda cfg, device, dtype: AutoencoderKL(cfg, device=device, dtype=dtype),
    to_module={"diffusers": _vae_from_diffusers},
)

# --- Text encoders --------------------------------------------------------------------------------
_CLIP_LAYERS = {"clip-l": 12, "clip-h": 24, "clip-g": 32}


def _clip_layers(t: Tensors) -> int:
    n = 0
    while (
        f"transformer.resblocks.{n}.ln_1.weight" in t
        or f"text_model.encoder.layers.{n}.layer_norm1.weight" in t
    ):
        n += 1
    return n


CLIP = Architecture(
    "clip-text",
    "text_encoder",
    tuple(_CLIP_LAYERS),
    configure=lambda shapes, family: CLIPTextConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: CLIPTextModel(cfg, device=device, dtype=dtype),
    to_module={
        "open_clip": lambda t, fam: open_clip_to_hf(
            {k: v for k, v in t.items() if not k.startswith("visual.") and k != "logit_scale"},
            num_layers=_clip_layers(t),
        )
    },
    to_file={"open_clip": lambda t, fam: hf_to_open_clip(t, num_layers=_clip_layers(t))},
    harmless=frozenset({"text_model.embeddings.position_ids", "logit_scale"}),
)


def _t5_aliases(t: Tensors, family: str) -> Tensors:
    """``encoder.embed_tokens.weight`` is a tied copy of ``shared.weight``: use it when alone."""
    if "shared.weight" not in t and "encoder.embed_tokens.weight" in t:
        out = dict(t)
        out["shared.weight"] = out.pop("encoder.embed_tokens.weight")
        return out
    return t


T5 = Architecture(
    "t5-encoder",
    "text_encoder",
    ("t5-xxl", "t5-base", "umt5-xxl"),
    configure=lambda shapes, family: T5Config.from_shapes(shapes),
    build=lambda cfg, device, dtype: T5Encoder(cfg, device=device, dtype=dtype),
    normalize=_t5_aliases,
    harmless=frozenset({"encoder.embed_tokens.weight"}),
)

ARCHITECTURES: tuple[Architecture, ...] = (
    UNET,
    MMDIT,
    FLUX,
    CHROMA,
    PIXART,
    NEXTDIT,
    VAE,
    CLIP,
    T5,
    LLM_ARCHITECTURE,
)
_BY_FAMILY: dict[str, Architecture] = {f: a for a in ARCHITECTURES for f in a.families}


def architecture_for(family: str) -> Architecture | None:
    return _BY_FAMILY.get(family)


def loadable_families() -> tuple[str, ...]:
    return tuple(_BY_FAMILY)
