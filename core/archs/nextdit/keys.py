"""Next-DiT's file layouts, as key maps onto the original (ComfyUI) layout the network is built in.

- **original**: Comfy-Org's repacks (``diffusion_models/z_image_turbo_bf16.safetensors``,
  ``lumina_2_model_bf16.safetensors``), Tongyi-MAI's and Alpha-VLLM's own checkpoints, NetaYume.
  Lumina 2's originals keep an unused ``norm_final.weight`` (ComfyUI and diffusers drop it too).
- **diffusers, Z-Image** (``ZImageTransformer2DModel``): q, k, v apart (``attention.to_q/to_k/to_v``),
  ``attention.to_out.0``, ``norm_q/norm_k``, the patch embedder and final layer under
  ``all_x_embedder.2-1`` / ``all_final_layer.2-1``; the rest named as the original.
- **diffusers, Lumina 2** (``Lumina2Transformer2DModel``): ``attn.to_q/...``, ``feed_forward.linear_1..3``,
  the modulated blocks' first norm and modulation as ``norm1.norm`` / ``norm1.linear`` (the
  context refiners' as ``norm1``), ``time_caption_embed.{timestep,caption}_embedder``,
  ``norm_out.linear_1`` (final modulation) and ``norm_out.linear_2`` (final projection).

The maps are data (:class:`KeyMapping` rows): they convert tensors when loading, shapes for
``loadout check``, and give LoRA files in diffusers/PEFT names their targets (a ``to_q`` LoRA
patches its rows of the fused ``qkv``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.archs.keymaps import KeyMapping, convert_state_dict

#: original keys ComfyUI and diffusers both drop (Lumina 2's unused final RMS norm)
HARMLESS = frozenset({"norm_final.weight"})


def _same(key: str, other: str | None = None) -> KeyMapping:
    return KeyMapping(key, (other or key,))


def _pair(original: str, diffusers: str, *, bias: bool = True) -> list[KeyMapping]:
    rows = [KeyMapping(f"{original}.weight", (f"{diffusers}.weight",))]
    if bias:
        rows.append(KeyMapping(f"{original}.bias", (f"{diffusers}.bias",)))
    return rows


def _count(keys: Mapping[str, object], prefix: str, leaf: str) -> int:
    n = 0
    while f"{prefix}{n}.{leaf}" in keys:
        n += 1
    return n


def _z_block(i: str, *, modulation: bool) -> list[KeyMapping]:
    a = f"{i}.attention"
    rows = [
        KeyMapping(f"{a}.qkv.weight", (f"{a}.to_q.weight", f"{a}.to_k.weight", f"{a}.to_v.weight")),
        _same(f"{a}.out.weight", f"{a}.to_out.0.weight"),
        _same(f"{a}.q_norm.weight", f"{a}.norm_q.weight"),
        _same(f"{a}.k_norm.weight", f"{a}.norm_k.weight"),
    ]
    rows += [_same(f"{i}.feed_forward.{w}.weight") for w in ("w1", "w2", "w3")]
    rows += [
        _same(f"{i}.{n}.weight") for n in ("attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2")
    ]
    if modulation:
        rows += _pair(f"{i}.adaLN_modulation.0", f"{i}.adaLN_modulation.0")
    return rows


def z_image_key_map(n_layers: int, n_refiners: int = 2) -> tuple[KeyMapping, ...]:
    """Every tensor of a Z-Image :class:`~core.models.nextdit.network.NextDiT` from
    ``ZImageTransformer2DModel`` keys."""
    rows = _pair("x_embedder", "all_x_embedder.2-1")
    rows += _pair("final_layer.linear", "all_final_layer.2-1.linear")
    rows += _pair("final_layer.adaLN_modulation.1", "all_final_layer.2-1.adaLN_modulation.1")
    rows += _pair("t_embedder.mlp.0", "t_embedder.mlp.0") + _pair("t_embedder.mlp.2", "t_embedder.mlp.2")
    rows += [_same("cap_embedder.0.weight"), *_pair("cap_embedder.1", "cap_embedder.1")]
    rows += [_same("x_pad_token"), _same("cap_pad_token")]
    for n in range(n_refiners):
        rows += _z_block(f"noise_refiner.{n}", modulation=True)
        rows += _z_block(f"context_refiner.{n}", modulation=False)
    for n in range(n_layers):
        rows += _z_block(f"layers.{n}", modulation=True)
    return tuple(rows)


def _lumina_block(i: str, *, modulation: bool) -> list[KeyMapping]:
    a, o = f"{i}.attn", f"{i}.attention"
    rows = [
        KeyMapping(f"{o}.qkv.weight", (f"{a}.to_q.weight", f"{a}.to_k.weight", f"{a}.to_v.weight")),
        _same(f"{o}.out.weight", f"{a}.to_out.0.weight"),
        _same(f"{o}.q_norm.weight", f"{a}.norm_q.weight"),
        _same(f"{o}.k_norm.weight", f"{a}.norm_k.weight"),
    ]
    rows += [_same(f"{i}.feed_forward.w{n}.weight", f"{i}.feed_forward.linear_{n}.weight") for n in (1, 2, 3)]
    rows += [_same(f"{i}.attention_norm2.weight", f"{i}.norm2.weight")]
    rows += [_same(f"{i}.{n}.weight") for n in ("ffn_norm1", "ffn_norm2")]
    if modulation:
        rows += [_same(f"{i}.attention_norm1.weight", f"{i}.norm1.norm.weight")]
        rows += _pair(f"{i}.adaLN_modulation.1", f"{i}.norm1.linear")
    else:
        rows += [_same(f"{i}.attention_norm1.weight", f"{i}.norm1.weight")]
    return rows


def lumina2_key_map(n_layers: int, n_refiners: int = 2) -> tuple[KeyMapping, ...]:
    """Every tensor of a Lumina 2 :class:`~core.models.nextdit.network.NextDiT` from
    ``Lumina2Transformer2DModel`` keys."""
    rows = _pair("x_embedder", "x_embedder")
    rows += _pair("t_embedder.mlp.0", "time_caption_embed.timestep_embedder.linear_1")
    rows += _pair("t_embedder.mlp.2", "time_caption_embed.timestep_embedder.linear_2")
    rows += [_same("cap_embedder.0.weight", "time_caption_embed.caption_embedder.0.weight")]
    rows += _pair("cap_embedder.1", "time_caption_embed.caption_embedder.1")
    rows += _pair("final_layer.adaLN_modulation.1", "norm_out.linear_1")
    rows += _pair("final_layer.linear", "norm_out.linear_2")
    for n in range(n_refiners):
        rows += _lumina_block(f"noise_refiner.{n}", modulation=True)
        rows += _lumina_block(f"context_refiner.{n}", modulation=False)
    for n in range(n_layers):
        rows += _lumina_block(f"layers.{n}", modulation=True)
    return tuple(rows)


def is_z_image_diffusers(keys: Mapping[str, object]) -> bool:
    return "all_x_embedder.2-1.weight" in keys


def diffusers_key_map(keys: Mapping[str, object]) -> tuple[KeyMapping, ...]:
    """The map for a diffusers-layout file, its form and depth read from its keys."""
    if is_z_image_diffusers(keys):
        layers = _count(keys, "layers.", "attention.to_q.weight")
        return z_image_key_map(layers, _count(keys, "noise_refiner.", "attention.to_q.weight"))
    layers = _count(keys, "layers.", "attn.to_q.weight")
    return lumina2_key_map(layers, _count(keys, "noise_refiner.", "attn.to_q.weight"))


def diffusers_to_original(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return convert_state_dict(state_dict, diffusers_key_map(state_dict), model="Next-DiT transformer")
