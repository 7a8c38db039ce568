"""Joint-attention transformers from shapes: SD3 / SD3.5, Flux (dev, schnell, fill, depth), Chroma, AuraFlow.

Each reader accepts the original release naming and, where files circulate in it, diffusers' naming
(SD3Transformer2DModel, FluxTransformer2DModel, AuraFlowTransformer2DModel).
"""

from __future__ import annotations

import math
from typing import Any

from core.detect.diffusion_probe import count_numbered, finish, is_controlnet, numbered_where
from core.detect.keyview import KeyView
from core.detect.registry import Match

# -- SD3 / SD3.5 ---------------------------------------------------------------------------------------
SD3_PROBES = (
    "joint_blocks.0.x_block.attn.qkv.weight",
    "joint_blocks.0.x_block.mlp.fc1.weight",
    "transformer_blocks.0.attn.to_q.weight",
    "transformer_blocks.0.ff.net.0.proj.weight",
)


def _sd3_family(depth: int, dual_attention: list[int]) -> tuple[str, list[str]]:
    if dual_attention:
        return "sd3.5-medium", []
    if depth >= 38:
        return "sd3.5-large", []
    if depth == 24:
        return "sd3", []
    return "sd3", [f"unusual MMDiT depth {depth} (SD3 medium has 24, SD3.5 large 38)"]


def _sd3_fields(view: KeyView, patch_key: str, pos_key: str, y_key: str, blocks: int) -> dict[str, Any]:
    w = view.shape(patch_key) or (0, 0, 0, 0)
    pos = view.dim(pos_key, 1)
    return {
        "hidden_size": w[0],
        "depth": w[0] // 64,
        "num_blocks": blocks,
        "in_channels": w[1],
        "patch_size": w[2] if len(w) > 2 else None,
        "adm_in_channels": view.dim(y_key, 1),
        "context_dim": view.dim("context_embedder.weight", 1),
        "pos_embed_max_size": math.isqrt(pos) if pos else None,
    }


def classify_sd3(view: KeyView) -> list[Match]:
    if is_controlnet(view):
        return []
    if "joint_blocks.0.context_block.attn.qkv.weight" in view:
        blocks = count_numbered(view, "joint_blocks.", ("x_block.attn.qkv.weight", "x_block.mlp.fc1.weight"))
        fields = _sd3_fields(view, "x_embedder.proj.weight", "pos_embed", "y_embedder.mlp.0.weight", blocks)
        fields["qk_norm"] = "joint_blocks.0.context_block.attn.ln_q.weight" in view
        dual = numbered_where(view, "joint_blocks.", "x_block.attn2.qkv.weight", blocks)
        layout = "original"
    elif "transformer_blocks.0.attn.add_q_proj.weight" in view and "pos_embed.proj.weight" in view:
        blocks = count_numbered(view, "transformer_blocks.", ("attn.to_q.weight", "norm1.linear.weight"))
        fields = _sd3_fields(
            view,
            "pos_embed.proj.weight",
            "pos_embed.pos_embed",
            "time_text_embed.text_embedder.linear_1.weight",
            blocks,
        )
        fields["qk_norm"] = "transformer_blocks.0.attn.norm_q.weight" in view
        dual = numbered_where(view, "transformer_blocks.", "attn2.to_q.weight", blocks)
        layout = "diffusers"
    else:
        return []
    fields["x_block_self_attn_layers"] = dual
    family, warnings = _sd3_family(fields["depth"], dual)
    return [finish(view, family, layout=layout, probes=SD3_PROBES, fields=fields, warnings=warnings)]


# -- Flux / Chroma ------------------------------------------------------------------------------------
FLUX_PROBES = (
    "double_blocks.0.img_attn.qkv.weight",
    "double_blocks.0.img_mlp.0.weight",
    "transformer_blocks.0.attn.to_q.weight",
    "transformer_blocks.0.ff.net.0.proj.weight",
)
#: img_in input features (16 latent channels x 2x2 patch, plus any concatenated conditioning)
#: 128: FLUX.1 Canny/Depth [dev] (variant "control": canny or depth, the weights do not say which)
CONTROL_NOTE = (
    "FLUX.1 Canny/Depth [dev]: it reads a control picture beside the latent (an edge map or a depth "
    "map: the weights do not say which it was trained on; the file name may)"
)
FLUX_INPUTS = {64: None, 384: "fill", 128: "control"}


def _flux_original(view: KeyView) -> tuple[dict[str, Any], bool] | None:
    if not view.has_any(
        ("double_blocks.0.img_attn.norm.key_norm.scale", "double_blocks.0.img_attn.norm.key_norm.weight")
    ):
        return None
    if "txt_in.individual_token_refiner.blocks.0.norm1.weight" in view or "img_in.weight" not in view:
        return None  # HunyuanVideo in ComfyUI naming; Chroma Radiance (pixel space)
    if "double_stream_modulation_img.lin.weight" in view:
        return None  # Flux 2: another architecture
    img_in = view.shape("img_in.weight") or (0, 0)
    fields: dict[str, Any] = {
        "hidden_size": img_in[0],
        "img_in_features": img_in[1],
        "context_in_dim": view.dim("txt_in.weight", 1),
        "vec_in_dim": view.dim("vector_in.in_layer.weight", 1),
        "depth": count_numbered(
            view, "double_blocks.", ("img_attn.qkv.weight", "img_attn.norm.key_norm.scale")
        ),
        "depth_single_blocks": count_numbered(
            view, "single_blocks.", ("linear1.weight", "norm.key_norm.scale")
        ),
        "guidance_embed": "guidance_in.in_layer.weight" in view,
    }
    chroma = view.has_any(
        ("distilled_guidance_layer.in_proj.weight", "distilled_guidance_layer.norms.0.scale")
    )
    if chroma:
        fields["approximator_layers"] = count_numbered(
            view, "distilled_guidance_layer.layers.", ("in_layer.weight",)
        )
        fields["approximator_hidden"] = view.dim("distilled_guidance_layer.in_proj.weight", 0)
    return fields, chroma


def _flux_diffusers(view: KeyView) -> tuple[dict[str, Any], bool] | None:
    x = view.shape("x_embedder.weight")
    if x is None or len(x) != 2 or "single_transformer_blocks.0.attn.to_q.weight" not in view:
        return None
    if "transformer_blocks.0.attn.add_q_proj.weight" not in view:
        return None
    fields: dict[str, Any] = {
        "hidden_size": x[0],
        "img_in_features": x[1],
        "context_in_dim": view.dim("context_embedder.weight", 1),
        "vec_in_dim": view.dim("time_text_embed.text_embedder.linear_1.weight", 1),
        "depth": count_numbered(view, "transformer_blocks.", ("attn.to_q.weight",)),
        "depth_single_blocks": count_numbered(view, "single_transformer_blocks.", ("attn.to_q.weight",)),
        "guidance_embed": "time_text_embed.guidance_embedder.linear_1.weight" in view,
    }
    chroma = "distilled_guidance_layer.in_proj.weight" in view
    if chroma:
        fields["approximator_layers"] = count_numbered(
            view, "distilled_guidance_layer.layers.", ("linear_1.weight",)
        )
        fields["approximator_hidden"] = view.dim("distilled_guidance_layer.in_proj.weight", 0)
    return fields, chroma


def classify_flux(view: KeyView) -> list[Match]:
    """Flux dev / schnell / fill (and Canny/Depth [dev]: variant "control"), and Chroma."""
    if is_controlnet(view):
        return []
    layout, out_key = "original", "final_layer.linear.weight"
    read = _flux_original(view)
    if read is None:
        layout, out_key, read = "diffusers", "proj_out.weight", _flux_diffusers(view)
    if read is None:
        return []
    fields, chroma = read
    fields["patch_size"] = 2
    fields["in_channels"] = fields["img_in_features"] // 4
    fields["out_channels"] = (view.dim(out_key, 0) or 64) // 4
    fields["num_heads"] = fields["hidden_size"] // 128
    warnings: list[str] = []
    variant = None
    if chroma:
        family = "chroma"
    else:
        kind = FLUX_INPUTS.get(fields["img_in_features"])
        if fields["img_in_features"] not in FLUX_INPUTS:
            warnings.append(f"unusual Flux input width {fields['img_in_features']}")
        family = "flux-fill" if kind == "fill" else "flux-dev" if fields["guidance_embed"] else "flux-schnell"
        variant = "control" if kind == "control" else None
        if variant == "control":
            warnings.append(CONTROL_NOTE)
        if family == "flux-dev" and kind != "control":
            fields["ambiguous_with"] = ["flux-kontext"]  # the same shapes: a name or metadata decides
    return [
        finish(
            view, family, layout=layout, probes=FLUX_PROBES, fields=fields, variant=variant, warnings=warnings
        )
    ]


# -- AuraFlow -----------------------------------------------------------------------------------------
AURAFLOW_PROBES = ("double_layers.0.attn.w1q.weight", "joint_transformer_blocks.0.attn.to_q.weight")


def classify_auraflow(view: KeyView) -> list[Match]:
    if "double_layers.0.attn.w1q.weight" in view and "cond_seq_linear.weight" in view:
        layout, pos, x = "original", "positional_encoding", "init_x_linear.weight"
        n_double = count_numbered(view, "double_layers.", ("attn.w1q.weight",))
        n_single = count_numbered(view, "single_layers.", ("attn.w1q.weight",))
        cond = view.dim("cond_seq_linear.weight", 1)
    elif "joint_transformer_blocks.0.attn.add_k_proj.weight" in view:
        layout, pos, x = "diffusers", "pos_embed.pos_embed", "pos_embed.proj.weight"
        n_double = count_numbered(view, "joint_transformer_blocks.", ("attn.to_q.weight",))
        n_single = count_numbered(view, "single_transformer_blocks.", ("attn.to_q.weight",))
        cond = view.dim("context_embedder.weight", 1)
    else:
        return []
    w = view.shape(x) or (0, 0)
    fields = {
        "hidden_size": w[0],
        "in_channels": w[1] // 4 if len(w) == 2 else None,
        "patch_size": 2,
        "n_double_layers": n_double,
        "n_layers": n_double + n_single,
        "max_seq": view.dim(pos, 1),
        "cond_seq_dim": cond,
    }
    return [finish(view, "auraflow", layout=layout, probes=AURAFLOW_PROBES, fields=fields)]
