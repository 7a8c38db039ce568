"""PixArt's weights as ``PixArtTransformer2DModel`` (diffusers) names them."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.archs.keymaps import KeyMapping, convert_state_dict, linear, mlp, qkv, same


def pixart_key_map(depth: int, *, micro_condition: bool = False) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`~core.archs.pixart.network.PixArt`, from ``PixArtTransformer2DModel`` keys
    (diffusers keeps no null-caption embedding and no position grid: the original has them as
    optional tensors). Cross-attention's k and v fuse into ``kv_linear``. ``micro_condition``:
    PixArt-α's size and aspect-ratio embedders."""
    emb = "adaln_single.emb"
    rows = linear("x_embedder.proj", "pos_embed.proj")
    rows += linear("t_embedder.mlp.0", f"{emb}.timestep_embedder.linear_1")
    rows += linear("t_embedder.mlp.2", f"{emb}.timestep_embedder.linear_2")
    if micro_condition:
        for original, diffusers in (
            ("csize_embedder", "resolution_embedder"),
            ("ar_embedder", "aspect_ratio_embedder"),
        ):
            rows += linear(f"{original}.mlp.0", f"{emb}.{diffusers}.linear_1")
            rows += linear(f"{original}.mlp.2", f"{emb}.{diffusers}.linear_2")
    rows += linear("t_block.1", "adaln_single.linear")
    rows += linear("y_embedder.y_proj.fc1", "caption_projection.linear_1")
    rows += linear("y_embedder.y_proj.fc2", "caption_projection.linear_2")
    for i in range(depth):
        o, d = f"blocks.{i}", f"transformer_blocks.{i}"
        rows.append(same(f"{o}.scale_shift_table", f"{d}.scale_shift_table"))
        rows += linear(f"{o}.attn.qkv", *qkv(f"{d}.attn1"))
        rows += linear(f"{o}.attn.proj", f"{d}.attn1.to_out.0")
        rows += linear(f"{o}.cross_attn.q_linear", f"{d}.attn2.to_q")
        rows += linear(f"{o}.cross_attn.kv_linear", f"{d}.attn2.to_k", f"{d}.attn2.to_v")
        rows += linear(f"{o}.cross_attn.proj", f"{d}.attn2.to_out.0")
        rows += mlp(f"{o}.mlp", f"{d}.ff", ("fc1", "fc2"))
    rows += linear("final_layer.linear", "proj_out")
    rows.append(same("final_layer.scale_shift_table", "scale_shift_table"))
    return tuple(rows)


def pixart_diffusers_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The depth and PixArt-α's micro-conditions are read from the keys (no presets to choose from)."""
    depth = 0
    while f"transformer_blocks.{depth}.scale_shift_table" in state_dict:
        depth += 1
    micro = "adaln_single.emb.resolution_embedder.linear_1.weight" in state_dict
    return convert_state_dict(
        state_dict, pixart_key_map(depth, micro_condition=micro), model="PixArt transformer"
    )
