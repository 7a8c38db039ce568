"""FLUX.1 ControlNet files: their config read from the tensor shapes and the key maps of their two
layouts, and the loader records (:data:`CONTROLNETS`).

* ``"diffusers"``: InstantX's and Shakker-Labs' files (diffusers' ``FluxControlNetModel``:
  ``transformer_blocks.N.attn.to_q``, ``controlnet_x_embedder``, ``controlnet_mode_embedder`` for the
  union nets); q, k and v are fused into the blocks' ``qkv`` as the base network's diffusers files are;
* ``"original"``: XLabs' files (``double_blocks.N.img_attn.qkv``, ``pos_embed_input``,
  ``input_hint_block.N``), the module's own names.

A ``"diffusers"`` net whose ``controlnet_x_embedder`` takes 17 channels per latent cell is Alimama's
inpainting ControlNet (the masked picture's latent with the kept part beside it: ComfyUI's
``concat_mask``, :class:`~core.archs.control.MaskedHint`). Refused in words: another hint width, a
net with a different number of output layers than blocks, a file with no ``pos_embed_input``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from core.archs.control import ControlNetLoader
from core.archs.flux.controlnet import UNION_TYPES, FluxControlConfig, FluxControlNet
from core.archs.flux.keys import flux_blocks
from core.archs.keymaps import KeyMapping, convert_shapes, linear, same
from core.detect.catalog import FLUX_CONTROLNETS
from core.detect.types import Detection
from core.models.flux import FluxConfig, count_blocks, rope_axes

Shapes = Mapping[str, tuple[int, ...]]
LATENT_CHANNELS = 16


def _embedders(guidance: bool) -> list[KeyMapping]:
    rows = linear("img_in", "x_embedder") + linear("txt_in", "context_embedder")
    rows += linear("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1")
    rows += linear("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2")
    rows += linear("vector_in.in_layer", "time_text_embed.text_embedder.linear_1")
    rows += linear("vector_in.out_layer", "time_text_embed.text_embedder.linear_2")
    if guidance:
        rows += linear("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1")
        rows += linear("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2")
    return rows


def diffusers_rows(depth: int, single: int, guidance: bool, union: bool) -> list[KeyMapping]:
    """Every tensor of a :class:`FluxControlNet` from a ``FluxControlNetModel`` file's keys."""
    rows = _embedders(guidance) + flux_blocks(depth, single, qkv_bias=True, modulation=True)
    rows += [r for i in range(depth) for r in linear(f"controlnet_blocks.{i}", f"controlnet_blocks.{i}")]
    rows += [
        r
        for i in range(single)
        for r in linear(f"controlnet_single_blocks.{i}", f"controlnet_single_blocks.{i}")
    ]
    rows += linear("pos_embed_input", "controlnet_x_embedder")
    if union:
        rows.append(same("controlnet_mode_embedder.weight", "controlnet_mode_embedder.weight"))
    return rows


def _original_shapes(shapes: Shapes) -> dict[str, tuple[int, ...]]:
    """A diffusers-layout file's shapes under the module's names (q, k, v fused)."""
    depth = count_blocks(shapes, "transformer_blocks.")
    single = count_blocks(shapes, "single_transformer_blocks.")
    guidance = "time_text_embed.guidance_embedder.linear_1.weight" in shapes
    union = "controlnet_mode_embedder.weight" in shapes
    return convert_shapes(shapes, diffusers_rows(depth, single, guidance, union), model="FLUX.1 ControlNet")


def control_config(shapes: Shapes, *, pixels: bool) -> FluxControlConfig:
    """The config of a FLUX.1 ControlNet whose tensors (module names) have these shapes."""
    for key in ("img_in.weight", "txt_in.weight", "vector_in.in_layer.weight", "pos_embed_input.weight"):
        if key not in shapes:
            raise KeyError(f"{key} (not a FLUX.1 ControlNet)")
    hidden, in_channels = shapes["img_in.weight"]
    head = shapes.get("double_blocks.0.img_attn.norm.query_norm.scale")
    if head is None:
        raise KeyError("double_blocks.0 (a FLUX.1 ControlNet has at least one double block)")
    mlp = shapes.get("double_blocks.0.img_mlp.0.weight", (hidden * 4,))
    flux = replace(
        FluxConfig(),
        in_channels=in_channels,
        vec_in_dim=shapes["vector_in.in_layer.weight"][1],
        context_in_dim=shapes["txt_in.weight"][1],
        hidden_size=hidden,
        mlp_ratio=mlp[0] / hidden,
        num_heads=hidden // head[0],
        depth=count_blocks(shapes, "double_blocks."),
        depth_single_blocks=count_blocks(shapes, "single_blocks."),
        axes_dim=rope_axes(head[0]),
        qkv_bias="double_blocks.0.img_attn.qkv.bias" in shapes,
        guidance_embed="guidance_in.in_layer.weight" in shapes,
    )
    outputs = (count_blocks(shapes, "controlnet_blocks."), count_blocks(shapes, "controlnet_single_blocks."))
    if outputs != (flux.depth, flux.depth_single_blocks):
        raise ValueError(
            f"{outputs[0]}/{outputs[1]} output layers for {flux.depth} double and "
            f"{flux.depth_single_blocks} single blocks"
        )
    hint = shapes["pos_embed_input.weight"][1]
    if not pixels and hint not in (LATENT_CHANNELS * 4, (LATENT_CHANNELS + 1) * 4):
        raise ValueError(
            f"its hint takes {hint / 4:g} channels per latent cell: neither the latent's {LATENT_CHANNELS} "
            f"nor the latent's with an inpainting mask ({LATENT_CHANNELS + 1})"
        )
    modes = shapes.get("controlnet_mode_embedder.weight", (0,))[0]
    return FluxControlConfig(flux, hint, union_modes=modes, pixels=pixels)


def build_diffusers(shapes: Shapes, det: Detection) -> FluxControlNet:
    with_meta = FluxControlNet(control_config(_original_shapes(shapes), pixels=False), device="meta")
    return with_meta


def build_original(shapes: Shapes, det: Detection) -> FluxControlNet:
    if "input_hint_block.0.weight" not in shapes:
        raise KeyError("input_hint_block.0.weight (XLabs' ControlNets convert the picture themselves)")
    return FluxControlNet(control_config(shapes, pixels=True), device="meta")


def diffusers_keys(module: object) -> Mapping[str, str | tuple[str, ...]]:
    """Module key -> the diffusers file's key, or the keys fused into it along dim 0."""
    assert isinstance(module, FluxControlNet)
    cfg = module.config.flux
    rows = diffusers_rows(cfg.depth, cfg.depth_single_blocks, cfg.guidance_embed, module.union)
    return {r.original: _one_or_all(r.diffusers) for r in rows}


def _one_or_all(keys: Sequence[str]) -> str | tuple[str, ...]:
    return keys[0] if len(keys) == 1 else tuple(keys)


CONTROLNETS = (
    ControlNetLoader(
        "flux-controlnet-instantx",
        FLUX_CONTROLNETS,
        build_diffusers,
        diffusers_keys,
        layouts=("diffusers",),
        control_types=UNION_TYPES,
    ),
    ControlNetLoader("flux-controlnet-xlabs", FLUX_CONTROLNETS, build_original, layouts=("original",)),
)
