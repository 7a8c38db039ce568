"""The SD3 MMDiT's weights as ``SD3Transformer2DModel`` (diffusers) names them."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.archs.keymaps import KeyMapping, added_qkv, convert_state_dict, linear, mlp, qkv, same
from core.models.mmdit import MMDiTConfig


def sd3_key_map(config: MMDiTConfig) -> tuple[KeyMapping, ...]:
    """Every tensor of an :class:`~core.models.mmdit.MMDiT`, from ``SD3Transformer2DModel`` keys."""
    rows = embedder_rows(config)
    for i in range(config.depth):
        rows += joint_block_rows(config, i, last=i == config.depth - 1)
    rows += linear("final_layer.linear", "proj_out")
    rows += linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap=True)
    return tuple(rows)


def embedder_rows(config: MMDiTConfig) -> list[KeyMapping]:
    """The patch, position, timestep, pooled-text and context embedders (``SD3ControlNetModel``
    names them as ``SD3Transformer2DModel`` does)."""
    rows = [same("pos_embed", "pos_embed.pos_embed"), *linear("x_embedder.proj", "pos_embed.proj")]
    rows += linear("t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1")
    rows += linear("t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2")
    if config.adm_in_channels is not None:
        rows += linear("y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1")
        rows += linear("y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2")
    if config.context_dim is not None:
        rows += linear("context_embedder", "context_embedder")
    return rows


def joint_block_rows(config: MMDiTConfig, i: int, *, last: bool) -> list[KeyMapping]:
    """Joint block ``i`` (``last``: the pre-only one, whose text stream ends after attention)."""
    o, d = f"joint_blocks.{i}", f"transformer_blocks.{i}"
    rows = linear(f"{o}.x_block.attn.qkv", *qkv(f"{d}.attn"))
    rows += linear(f"{o}.x_block.attn.proj", f"{d}.attn.to_out.0")
    rows += linear(f"{o}.x_block.adaLN_modulation.1", f"{d}.norm1.linear")
    rows += mlp(f"{o}.x_block.mlp", f"{d}.ff", ("fc1", "fc2"))
    rows += linear(f"{o}.context_block.attn.qkv", *added_qkv(f"{d}.attn"))
    rows += linear(f"{o}.context_block.adaLN_modulation.1", f"{d}.norm1_context.linear", swap=last)
    if not last:
        rows += linear(f"{o}.context_block.attn.proj", f"{d}.attn.to_add_out")
        rows += mlp(f"{o}.context_block.mlp", f"{d}.ff_context", ("fc1", "fc2"))
    if config.qk_norm is not None:
        rows += [
            same(f"{o}.x_block.attn.ln_q.weight", f"{d}.attn.norm_q.weight"),
            same(f"{o}.x_block.attn.ln_k.weight", f"{d}.attn.norm_k.weight"),
            same(f"{o}.context_block.attn.ln_q.weight", f"{d}.attn.norm_added_q.weight"),
            same(f"{o}.context_block.attn.ln_k.weight", f"{d}.attn.norm_added_k.weight"),
        ]
    if i in config.dual_attention_layers:
        rows += linear(f"{o}.x_block.attn2.qkv", *qkv(f"{d}.attn2"))
        rows += linear(f"{o}.x_block.attn2.proj", f"{d}.attn2.to_out.0")
        if config.qk_norm is not None:
            rows += [
                same(f"{o}.x_block.attn2.ln_q.weight", f"{d}.attn2.norm_q.weight"),
                same(f"{o}.x_block.attn2.ln_k.weight", f"{d}.attn2.norm_k.weight"),
            ]
    return rows


def sd3_diffusers_to_original(
    state_dict: Mapping[str, torch.Tensor], config: MMDiTConfig
) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, sd3_key_map(config), model="SD3 MMDiT")
