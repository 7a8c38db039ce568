"""diffusers -> original key layout for the SD3 MMDiT, Flux, Chroma and PixArt transformers.

Where the originals fuse projections (``qkv``; Flux single blocks' ``linear1`` = q, k, v, MLP in)
diffusers keeps them apart: the mapping concatenates along the output dimension, in order. The
final adaLN layers (and SD3's last, pre-only context block) store [shift, scale] in the originals
and [scale, shift] in diffusers (``AdaLayerNormContinuous``): those halves are swapped back.

A key map is data (:class:`KeyMapping` rows) and works on tensors and on shapes alike, so a
diffusers file can be checked against an architecture from its header alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from core.errors import ModelMismatchError
from core.models.chroma import ChromaConfig
from core.models.flux import FluxConfig
from core.models.mmdit import MMDiTConfig

T = TypeVar("T")


@dataclass(frozen=True)
class KeyMapping:
    """``original`` is made of the ``diffusers`` tensors concatenated along dim 0, in order; with
    ``swap_halves`` the two halves of the result trade places."""

    original: str
    diffusers: tuple[str, ...]
    swap_halves: bool = False


def _linear(original: str, *diffusers: str, bias: bool = True, swap: bool = False) -> list[KeyMapping]:
    rows = [KeyMapping(f"{original}.weight", tuple(f"{d}.weight" for d in diffusers), swap)]
    if bias:
        rows.append(KeyMapping(f"{original}.bias", tuple(f"{d}.bias" for d in diffusers), swap))
    return rows


def _same(original: str, diffusers: str) -> KeyMapping:
    return KeyMapping(original, (diffusers,))


def _qkv(prefix: str) -> tuple[str, str, str]:
    return (f"{prefix}.to_q", f"{prefix}.to_k", f"{prefix}.to_v")


def _added_qkv(prefix: str) -> tuple[str, str, str]:
    return (f"{prefix}.add_q_proj", f"{prefix}.add_k_proj", f"{prefix}.add_v_proj")


def _mlp(original: str, diffusers: str, fc: tuple[str, str]) -> list[KeyMapping]:
    return _linear(f"{original}.{fc[0]}", f"{diffusers}.net.0.proj") + _linear(
        f"{original}.{fc[1]}", f"{diffusers}.net.2"
    )


def sd3_key_map(config: MMDiTConfig) -> tuple[KeyMapping, ...]:
    """Every tensor of an :class:`~core.models.mmdit.MMDiT`, from ``SD3Transformer2DModel`` keys."""
    rows = [_same("pos_embed", "pos_embed.pos_embed"), *_linear("x_embedder.proj", "pos_embed.proj")]
    rows += _linear("t_embedder.mlp.0", "time_text_embed.timestep_embedder.linear_1")
    rows += _linear("t_embedder.mlp.2", "time_text_embed.timestep_embedder.linear_2")
    if config.adm_in_channels is not None:
        rows += _linear("y_embedder.mlp.0", "time_text_embed.text_embedder.linear_1")
        rows += _linear("y_embedder.mlp.2", "time_text_embed.text_embedder.linear_2")
    if config.context_dim is not None:
        rows += _linear("context_embedder", "context_embedder")
    for i in range(config.depth):
        o, d = f"joint_blocks.{i}", f"transformer_blocks.{i}"
        last = i == config.depth - 1
        rows += _linear(f"{o}.x_block.attn.qkv", *_qkv(f"{d}.attn"))
        rows += _linear(f"{o}.x_block.attn.proj", f"{d}.attn.to_out.0")
        rows += _linear(f"{o}.x_block.adaLN_modulation.1", f"{d}.norm1.linear")
        rows += _mlp(f"{o}.x_block.mlp", f"{d}.ff", ("fc1", "fc2"))
        rows += _linear(f"{o}.context_block.attn.qkv", *_added_qkv(f"{d}.attn"))
        rows += _linear(f"{o}.context_block.adaLN_modulation.1", f"{d}.norm1_context.linear", swap=last)
        if not last:
            rows += _linear(f"{o}.context_block.attn.proj", f"{d}.attn.to_add_out")
            rows += _mlp(f"{o}.context_block.mlp", f"{d}.ff_context", ("fc1", "fc2"))
        if config.qk_norm is not None:
            rows += [
                _same(f"{o}.x_block.attn.ln_q.weight", f"{d}.attn.norm_q.weight"),
                _same(f"{o}.x_block.attn.ln_k.weight", f"{d}.attn.norm_k.weight"),
                _same(f"{o}.context_block.attn.ln_q.weight", f"{d}.attn.norm_added_q.weight"),
                _same(f"{o}.context_block.attn.ln_k.weight", f"{d}.attn.norm_added_k.weight"),
            ]
        if i in config.dual_attention_layers:
            rows += _linear(f"{o}.x_block.attn2.qkv", *_qkv(f"{d}.attn2"))
            rows += _linear(f"{o}.x_block.attn2.proj", f"{d}.attn2.to_out.0")
            if config.qk_norm is not None:
                rows += [
                    _same(f"{o}.x_block.attn2.ln_q.weight", f"{d}.attn2.norm_q.weight"),
                    _same(f"{o}.x_block.attn2.ln_k.weight", f"{d}.attn2.norm_k.weight"),
                ]
    rows += _linear("final_layer.linear", "proj_out")
    rows += _linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap=True)
    return tuple(rows)


def _flux_blocks(depth: int, single: int, qkv_bias: bool, modulation: bool) -> list[KeyMapping]:
    rows: list[KeyMapping] = []
    for i in range(depth):
        o, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        if modulation:
            rows += _linear(f"{o}.img_mod.lin", f"{d}.norm1.linear")
            rows += _linear(f"{o}.txt_mod.lin", f"{d}.norm1_context.linear")
        rows += _linear(f"{o}.img_attn.qkv", *_qkv(f"{d}.attn"), bias=qkv_bias)
        rows += _linear(f"{o}.txt_attn.qkv", *_added_qkv(f"{d}.attn"), bias=qkv_bias)
        rows += [
            _same(f"{o}.img_attn.norm.query_norm.scale", f"{d}.attn.norm_q.weight"),
            _same(f"{o}.img_attn.norm.key_norm.scale", f"{d}.attn.norm_k.weight"),
            _same(f"{o}.txt_attn.norm.query_norm.scale", f"{d}.attn.norm_added_q.weight"),
            _same(f"{o}.txt_attn.norm.key_norm.scale", f"{d}.attn.norm_added_k.weight"),
        ]
        rows += _linear(f"{o}.img_attn.proj", f"{d}.attn.to_out.0")
        rows += _linear(f"{o}.txt_attn.proj", f"{d}.attn.to_add_out")
        rows += _mlp(f"{o}.img_mlp", f"{d}.ff", ("0", "2"))
        rows += _mlp(f"{o}.txt_mlp", f"{d}.ff_context", ("0", "2"))
    for i in range(single):
        o, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        rows += _linear(f"{o}.linear1", *_qkv(f"{d}.attn"), f"{d}.proj_mlp")
        rows += _linear(f"{o}.linear2", f"{d}.proj_out")
        rows += [
            _same(f"{o}.norm.query_norm.scale", f"{d}.attn.norm_q.weight"),
            _same(f"{o}.norm.key_norm.scale", f"{d}.attn.norm_k.weight"),
        ]
        if modulation:
            rows += _linear(f"{o}.modulation.lin", f"{d}.norm.linear")
    return rows


def flux_key_map(config: FluxConfig) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`~core.models.flux.Flux`, from ``FluxTransformer2DModel`` keys."""
    rows = _linear("img_in", "x_embedder") + _linear("txt_in", "context_embedder")
    rows += _linear("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1")
    rows += _linear("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2")
    rows += _linear("vector_in.in_layer", "time_text_embed.text_embedder.linear_1")
    rows += _linear("vector_in.out_layer", "time_text_embed.text_embedder.linear_2")
    if config.guidance_embed:
        rows += _linear("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1")
        rows += _linear("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2")
    rows += _flux_blocks(config.depth, config.depth_single_blocks, config.qkv_bias, modulation=True)
    rows += _linear("final_layer.linear", "proj_out")
    rows += _linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap=True)
    return tuple(rows)


def chroma_key_map(config: ChromaConfig) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`~core.models.chroma.Chroma`, from ``ChromaTransformer2DModel`` keys."""
    g = "distilled_guidance_layer"
    rows = _linear("img_in", "x_embedder") + _linear("txt_in", "context_embedder")
    rows += _linear(f"{g}.in_proj", f"{g}.in_proj") + _linear(f"{g}.out_proj", f"{g}.out_proj")
    for i in range(config.approximator_depth):
        rows += _linear(f"{g}.layers.{i}.in_layer", f"{g}.layers.{i}.linear_1")
        rows += _linear(f"{g}.layers.{i}.out_layer", f"{g}.layers.{i}.linear_2")
        rows.append(_same(f"{g}.norms.{i}.scale", f"{g}.norms.{i}.weight"))
    rows += _flux_blocks(config.depth, config.depth_single_blocks, config.qkv_bias, modulation=False)
    rows += _linear("final_layer.linear", "proj_out")
    return tuple(rows)


def pixart_key_map(depth: int, *, micro_condition: bool = False) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`~core.models.pixart.PixArt`, from ``PixArtTransformer2DModel`` keys
    (diffusers keeps no null-caption embedding and no position grid: the original has them as
    optional tensors). Cross-attention's k and v fuse into ``kv_linear``. ``micro_condition``:
    PixArt-α's size and aspect-ratio embedders."""
    emb = "adaln_single.emb"
    rows = _linear("x_embedder.proj", "pos_embed.proj")
    rows += _linear("t_embedder.mlp.0", f"{emb}.timestep_embedder.linear_1")
    rows += _linear("t_embedder.mlp.2", f"{emb}.timestep_embedder.linear_2")
    if micro_condition:
        for original, diffusers in (
            ("csize_embedder", "resolution_embedder"),
            ("ar_embedder", "aspect_ratio_embedder"),
        ):
            rows += _linear(f"{original}.mlp.0", f"{emb}.{diffusers}.linear_1")
            rows += _linear(f"{original}.mlp.2", f"{emb}.{diffusers}.linear_2")
    rows += _linear("t_block.1", "adaln_single.linear")
    rows += _linear("y_embedder.y_proj.fc1", "caption_projection.linear_1")
    rows += _linear("y_embedder.y_proj.fc2", "caption_projection.linear_2")
    for i in range(depth):
        o, d = f"blocks.{i}", f"transformer_blocks.{i}"
        rows.append(_same(f"{o}.scale_shift_table", f"{d}.scale_shift_table"))
        rows += _linear(f"{o}.attn.qkv", *_qkv(f"{d}.attn1"))
        rows += _linear(f"{o}.attn.proj", f"{d}.attn1.to_out.0")
        rows += _linear(f"{o}.cross_attn.q_linear", f"{d}.attn2.to_q")
        rows += _linear(f"{o}.cross_attn.kv_linear", f"{d}.attn2.to_k", f"{d}.attn2.to_v")
        rows += _linear(f"{o}.cross_attn.proj", f"{d}.attn2.to_out.0")
        rows += _mlp(f"{o}.mlp", f"{d}.ff", ("fc1", "fc2"))
    rows += _linear("final_layer.linear", "proj_out")
    rows.append(_same("final_layer.scale_shift_table", "scale_shift_table"))
    return tuple(rows)


def _apply(
    source: Mapping[str, T],
    mappings: Sequence[KeyMapping],
    merge: Callable[[KeyMapping, list[T]], T],
    model: str,
) -> dict[str, T]:
    missing = [k for m in mappings for k in m.diffusers if k not in source]
    used = {k for m in mappings for k in m.diffusers}
    unmapped = sorted(k for k in source if k not in used)
    if missing or unmapped:
        parts = []
        if unmapped:
            parts.append(f"{len(unmapped)} unmapped diffusers keys: {_preview(unmapped)}")
        if missing:
            parts.append(f"{len(missing)} expected keys absent: {_preview(missing)}")
        raise ModelMismatchError(
            f"These diffusers tensors do not match a {model} with this config",
            why="; ".join(parts),
            fix="check the model family and its config (depth, guidance, qk-norm, dual attention)",
        )
    return {m.original: merge(m, [source[k] for k in m.diffusers]) for m in mappings}


def _preview(keys: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def _merge_tensors(m: KeyMapping, parts: list[torch.Tensor]) -> torch.Tensor:
    t = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    if m.swap_halves:
        first, second = t.chunk(2, dim=0)
        t = torch.cat((second, first), dim=0)
    return t


def _merge_shapes(m: KeyMapping, parts: list[tuple[int, ...]]) -> tuple[int, ...]:
    rest = {p[1:] for p in parts}
    if len(rest) != 1:
        raise ModelMismatchError(
            f"Cannot fuse {', '.join(m.diffusers)} into {m.original}",
            why=f"their shapes {parts} differ beyond the first dimension",
            fix="the file is damaged or of another architecture",
        )
    return (sum(p[0] for p in parts), *parts[0][1:])


def convert_state_dict(
    state_dict: Mapping[str, torch.Tensor], mappings: Sequence[KeyMapping], *, model: str = "model"
) -> dict[str, torch.Tensor]:
    """Apply a key map to tensors; raises ModelMismatchError listing unmapped and absent keys."""
    return _apply(state_dict, mappings, _merge_tensors, model)


def convert_shapes(
    shapes: Mapping[str, Sequence[int]], mappings: Sequence[KeyMapping], *, model: str = "model"
) -> dict[str, tuple[int, ...]]:
    """Apply a key map to a header's shapes: the original-layout shapes the tensors would have."""
    return _apply({k: tuple(int(d) for d in v) for k, v in shapes.items()}, mappings, _merge_shapes, model)


def sd3_diffusers_to_original(
    state_dict: Mapping[str, torch.Tensor], config: MMDiTConfig
) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, sd3_key_map(config), model="SD3 MMDiT")


def flux_diffusers_to_original(
    state_dict: Mapping[str, torch.Tensor], config: FluxConfig
) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, flux_key_map(config), model="Flux transformer")


def pixart_diffusers_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The depth and PixArt-α's micro-conditions are read from the keys (no presets to choose from)."""
    depth = 0
    while f"transformer_blocks.{depth}.scale_shift_table" in state_dict:
        depth += 1
    micro = "adaln_single.emb.resolution_embedder.linear_1.weight" in state_dict
    return convert_state_dict(
        state_dict, pixart_key_map(depth, micro_condition=micro), model="PixArt transformer"
    )


def chroma_diffusers_to_original(
    state_dict: Mapping[str, torch.Tensor], config: ChromaConfig
) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, chroma_key_map(config), model="Chroma transformer")
