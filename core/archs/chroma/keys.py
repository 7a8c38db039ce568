"""Chroma's weights as ``ChromaTransformer2DModel`` (diffusers) names them (Flux's blocks without
their modulation layers, plus the distilled guidance approximator)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.archs.flux.keys import flux_blocks
from core.archs.keymaps import KeyMapping, convert_state_dict, linear, same
from core.models.chroma import ChromaConfig


def chroma_key_map(config: ChromaConfig) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`~core.models.chroma.Chroma`, from ``ChromaTransformer2DModel`` keys."""
    g = "distilled_guidance_layer"
    rows = linear("img_in", "x_embedder") + linear("txt_in", "context_embedder")
    rows += linear(f"{g}.in_proj", f"{g}.in_proj") + linear(f"{g}.out_proj", f"{g}.out_proj")
    for i in range(config.approximator_depth):
        rows += linear(f"{g}.layers.{i}.in_layer", f"{g}.layers.{i}.linear_1")
        rows += linear(f"{g}.layers.{i}.out_layer", f"{g}.layers.{i}.linear_2")
        rows.append(same(f"{g}.norms.{i}.scale", f"{g}.norms.{i}.weight"))
    rows += flux_blocks(config.depth, config.depth_single_blocks, config.qkv_bias, modulation=False)
    rows += linear("final_layer.linear", "proj_out")
    return tuple(rows)


def chroma_diffusers_to_original(
    state_dict: Mapping[str, torch.Tensor], config: ChromaConfig
) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, chroma_key_map(config), model="Chroma transformer")
