"""Flux's weights as ``FluxTransformer2DModel`` (diffusers) names them; the double and single blocks'
map is Chroma's too."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.archs.keymaps import KeyMapping, added_qkv, convert_state_dict, linear, mlp, qkv, same
from core.models.flux import FluxConfig


def flux_blocks(depth: int, single: int, qkv_bias: bool, modulation: bool) -> list[KeyMapping]:
    rows: list[KeyMapping] = []
    for i in range(depth):
        o, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        if modulation:
            rows += linear(f"{o}.img_mod.lin", f"{d}.norm1.linear")
            rows += linear(f"{o}.txt_mod.lin", f"{d}.norm1_context.linear")
        rows += linear(f"{o}.img_attn.qkv", *qkv(f"{d}.attn"), bias=qkv_bias)
        rows += linear(f"{o}.txt_attn.qkv", *added_qkv(f"{d}.attn"), bias=qkv_bias)
        rows += [
            same(f"{o}.img_attn.norm.query_norm.scale", f"{d}.attn.norm_q.weight"),
            same(f"{o}.img_attn.norm.key_norm.scale", f"{d}.attn.norm_k.weight"),
            same(f"{o}.txt_attn.norm.query_norm.scale", f"{d}.attn.norm_added_q.weight"),
            same(f"{o}.txt_attn.norm.key_norm.scale", f"{d}.attn.norm_added_k.weight"),
        ]
        rows += linear(f"{o}.img_attn.proj", f"{d}.attn.to_out.0")
        rows += linear(f"{o}.txt_attn.proj", f"{d}.attn.to_add_out")
        rows += mlp(f"{o}.img_mlp", f"{d}.ff", ("0", "2"))
        rows += mlp(f"{o}.txt_mlp", f"{d}.ff_context", ("0", "2"))
    for i in range(single):
        o, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        rows += linear(f"{o}.linear1", *qkv(f"{d}.attn"), f"{d}.proj_mlp")
        rows += linear(f"{o}.linear2", f"{d}.proj_out")
        rows += [
            same(f"{o}.norm.query_norm.scale", f"{d}.attn.norm_q.weight"),
            same(f"{o}.norm.key_norm.scale", f"{d}.attn.norm_k.weight"),
        ]
        if modulation:
            rows += linear(f"{o}.modulation.lin", f"{d}.norm.linear")
    return rows


def flux_key_map(config: FluxConfig) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`~core.models.flux.Flux`, from ``FluxTransformer2DModel`` keys."""
    rows = linear("img_in", "x_embedder") + linear("txt_in", "context_embedder")
    rows += linear("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1")
    rows += linear("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2")
    rows += linear("vector_in.in_layer", "time_text_embed.text_embedder.linear_1")
    rows += linear("vector_in.out_layer", "time_text_embed.text_embedder.linear_2")
    if config.guidance_embed:
        rows += linear("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1")
        rows += linear("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2")
    rows += flux_blocks(config.depth, config.depth_single_blocks, config.qkv_bias, modulation=True)
    rows += linear("final_layer.linear", "proj_out")
    rows += linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap=True)
    return tuple(rows)


def flux_diffusers_to_original(
    state_dict: Mapping[str, torch.Tensor], config: FluxConfig
) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, flux_key_map(config), model="Flux transformer")
