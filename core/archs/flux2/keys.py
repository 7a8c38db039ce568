"""FLUX.2's file layouts, as key maps onto the original (Black Forest Labs / ComfyUI) layout the
network is built in.

- **original**: BFL's releases and Comfy-Org's repacks (``flux-2-klein-4b.safetensors``,
  ``flux-2-klein-9b.safetensors``, ``flux2_dev_fp8mixed.safetensors``), GGUF files (the same names).
- **diffusers** (``Flux2Transformer2DModel``): the double blocks' fused ``qkv`` as ``attn.to_q/k/v``
  (image) and ``attn.add_q/k/v_proj`` (text), the MLPs as ``ff.linear_in/out`` and
  ``ff_context.linear_in/out``, the single blocks' ``linear1``/``linear2`` as
  ``attn.to_qkv_mlp_proj``/``attn.to_out``, the shared modulations' ``lin`` as ``linear``, the
  embedders under ``time_guidance_embed``, the final modulation as ``norm_out.linear`` with its
  shift and scale halves swapped.

The map is read from the keys themselves (depths, dev's guidance embedder), so any size converts;
it also gives LoRA files in diffusers/PEFT names their targets (a ``to_q`` LoRA patches its rows of
the fused ``qkv``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from core.archs.keymaps import KeyMapping, added_qkv, convert_state_dict, linear, qkv, same


def _count(keys: Mapping[str, object], prefix: str) -> int:
    found = {int(m.group(1)) for k in keys if (m := re.match(re.escape(prefix) + r"(\d+)\.", k))}
    return max(found) + 1 if found else 0


def flux2_key_map(depth: int, single: int, guidance: bool) -> tuple[KeyMapping, ...]:
    """Every tensor of a :class:`~core.models.flux2.Flux2`, from ``Flux2Transformer2DModel`` keys."""
    rows = linear("img_in", "x_embedder", bias=False) + linear("txt_in", "context_embedder", bias=False)
    emb = "time_guidance_embed"
    rows += linear("time_in.in_layer", f"{emb}.timestep_embedder.linear_1", bias=False)
    rows += linear("time_in.out_layer", f"{emb}.timestep_embedder.linear_2", bias=False)
    if guidance:
        rows += linear("guidance_in.in_layer", f"{emb}.guidance_embedder.linear_1", bias=False)
        rows += linear("guidance_in.out_layer", f"{emb}.guidance_embedder.linear_2", bias=False)
    for mod in ("double_stream_modulation_img", "double_stream_modulation_txt", "single_stream_modulation"):
        rows += linear(f"{mod}.lin", f"{mod}.linear", bias=False)
    for i in range(depth):
        o, d = f"double_blocks.{i}", f"transformer_blocks.{i}"
        rows += linear(f"{o}.img_attn.qkv", *qkv(f"{d}.attn"), bias=False)
        rows += linear(f"{o}.txt_attn.qkv", *added_qkv(f"{d}.attn"), bias=False)
        rows += [
            same(f"{o}.img_attn.norm.query_norm.scale", f"{d}.attn.norm_q.weight"),
            same(f"{o}.img_attn.norm.key_norm.scale", f"{d}.attn.norm_k.weight"),
            same(f"{o}.txt_attn.norm.query_norm.scale", f"{d}.attn.norm_added_q.weight"),
            same(f"{o}.txt_attn.norm.key_norm.scale", f"{d}.attn.norm_added_k.weight"),
        ]
        rows += linear(f"{o}.img_attn.proj", f"{d}.attn.to_out.0", bias=False)
        rows += linear(f"{o}.txt_attn.proj", f"{d}.attn.to_add_out", bias=False)
        for stream, ff in (("img_mlp", "ff"), ("txt_mlp", "ff_context")):
            rows += linear(f"{o}.{stream}.0", f"{d}.{ff}.linear_in", bias=False)
            rows += linear(f"{o}.{stream}.2", f"{d}.{ff}.linear_out", bias=False)
    for i in range(single):
        o, d = f"single_blocks.{i}", f"single_transformer_blocks.{i}"
        rows += linear(f"{o}.linear1", f"{d}.attn.to_qkv_mlp_proj", bias=False)
        rows += linear(f"{o}.linear2", f"{d}.attn.to_out", bias=False)
        rows += [
            same(f"{o}.norm.query_norm.scale", f"{d}.attn.norm_q.weight"),
            same(f"{o}.norm.key_norm.scale", f"{d}.attn.norm_k.weight"),
        ]
    rows += linear("final_layer.linear", "proj_out", bias=False)
    rows += linear("final_layer.adaLN_modulation.1", "norm_out.linear", bias=False, swap=True)
    return tuple(rows)


def diffusers_key_map(keys: Mapping[str, object]) -> tuple[KeyMapping, ...]:
    """The map for a diffusers-layout file, its depths and guidance embedder read from its keys."""
    return flux2_key_map(
        _count(keys, "transformer_blocks."),
        _count(keys, "single_transformer_blocks."),
        "time_guidance_embed.guidance_embedder.linear_1.weight" in keys,
    )


def diffusers_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, diffusers_key_map(state_dict), model="FLUX.2 transformer")
