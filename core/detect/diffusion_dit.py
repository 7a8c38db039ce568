"""Image diffusion transformers from shapes: HunyuanDiT, PixArt, Stable Cascade, Lumina 2 / Z-Image,
HiDream, Qwen-Image.
"""

from __future__ import annotations

import math
from typing import Any

from core.detect.diffusion_probe import count_numbered, finish, is_controlnet
from core.detect.keyview import KeyView
from core.detect.registry import Match


# -- HunyuanDiT ---------------------------------------------------------------------------------------
def classify_hunyuan_dit(view: KeyView) -> list[Match]:
    if "mlp_t5.0.weight" not in view or "x_embedder.proj.weight" not in view or is_controlnet(view):
        return []
    x = view.shape("x_embedder.proj.weight") or (0, 0)
    extra = view.dim("extra_embedder.0.weight", 1)
    fields = {
        "hidden_size": x[0],
        "in_channels": x[1],
        "depth": count_numbered(view, "blocks.", ("attn1.Wqkv.weight", "norm1.weight")),
        "extra_in_dim": extra,
        "size_cond": extra == 3968,  # v1.0/v1.1: image size and style conditioning; v1.2 dropped them
        "version": "1.0/1.1" if extra == 3968 else "1.2",
    }
    probes = ("blocks.0.attn1.Wqkv.weight", "blocks.0.mlp.fc1.weight")
    return [finish(view, "hunyuan-dit", layout="original", probes=probes, fields=fields)]


# -- PixArt -------------------------------------------------------------------------------------------
PIXART_TOKENS = {120: "pixart-alpha", 300: "pixart-sigma"}  # T5 tokens of the null caption embedding


def classify_pixart(view: KeyView) -> list[Match]:
    if is_controlnet(view):
        return []
    warnings: list[str] = []
    if "t_block.1.weight" in view and "x_embedder.proj.weight" in view:
        layout, x, depth_key = "original", "x_embedder.proj.weight", "attn.qkv.weight"
        tokens = view.dim("y_embedder.y_embedding", 0)
        micro = "ar_embedder.mlp.0.weight" in view
        pos = view.dim("pos_embed", 1)
        blocks = count_numbered(view, "blocks.", ("attn.qkv.weight", "scale_shift_table"))
        out = view.dim("final_layer.linear.weight", 0)
    elif (
        "adaln_single.emb.timestep_embedder.linear_1.weight" in view
        and "pos_embed.proj.weight" in view
        and "transformer_blocks.0.attn2.to_k.weight" in view
    ):
        layout, x, depth_key = "diffusers", "pos_embed.proj.weight", "attn1.to_q.weight"
        tokens, pos = view.dim("caption_projection.y_embedding", 0), None
        micro = "adaln_single.emb.resolution_embedder.linear_1.weight" in view
        blocks = count_numbered(view, "transformer_blocks.", ("attn1.to_q.weight", "scale_shift_table"))
        out = view.dim("proj_out.weight", 0)
    else:
        return []
    family = PIXART_TOKENS.get(tokens or 0)
    if family is None:
        family = "pixart-alpha" if micro else "pixart-sigma"
        if not micro:
            warnings.append(
                "PixArt-sigma assumed: PixArt-alpha 512 has the same shapes without its caption embedding"
            )
    w = view.shape(x) or (0, 0)
    fields: dict[str, Any] = {
        "hidden_size": w[0],
        "in_channels": w[1],
        "out_channels": out // 4 if out else None,
        "depth": blocks,
        "model_max_length": tokens,
        "micro_condition": micro,
        "input_size": math.isqrt(pos) * 2 if pos else None,
    }
    probes = (f"blocks.0.{depth_key}", f"transformer_blocks.0.{depth_key}")
    return [finish(view, family, layout=layout, probes=probes, fields=fields, warnings=warnings)]


# -- Stable Cascade -----------------------------------------------------------------------------------
def classify_cascade(view: KeyView) -> list[Match]:
    if "clf.1.weight" not in view or "embedding.1.weight" not in view:
        return []
    diffusers = view.has_any(
        ("down_blocks.0.2.attention.to_q.weight", "down_blocks.2.2.attention.to_q.weight")
    )
    fields: dict[str, Any] = {
        "c_hidden": view.dim("embedding.1.weight", 0),
        "out_channels": view.dim("clf.1.weight", 0),
    }
    if "clip_txt_mapper.weight" in view:
        family, cond = "stable-cascade-c", view.dim("clip_txt_mapper.weight", 0)
        lite = cond == 1536
        fields.update(stage="c", c_cond=cond)
    elif view.has_any(("clip_mapper.weight", "clip_txt_pooled_mapper.weight")):
        family = "stable-cascade-b"
        lite = view.dim("down_blocks.1.0.channelwise.0.weight", -1) == 576
        fields["stage"] = "b"
    else:
        return []
    fields["in_channels"] = view.dim("embedding.1.weight", 1)
    probes = ("down_blocks.0.0.channelwise.0.weight", "down_blocks.1.0.channelwise.0.weight")
    layout = "diffusers" if diffusers else "original"
    return [
        finish(view, family, layout=layout, probes=probes, fields=fields, variant="lite" if lite else None)
    ]


# -- Lumina 2 / Z-Image -------------------------------------------------------------------------------
#: each Next-DiT form's released width (detection goes by the form, read from the modulation layers)
LUMINA_DIMS = {"lumina2": 2304, "z-image": 3840}
#: (layout, caption embedder, patch embedder, a block's query weight, a q/k norm) per key scheme
_LUMINA_LAYOUTS = (
    ("original", "cap_embedder.1.weight", "x_embedder.weight", "attention.qkv.weight", "attention.k_norm"),
    (
        "diffusers",
        "cap_embedder.1.weight",
        "all_x_embedder.2-1.weight",
        "attention.to_q.weight",
        "attention.norm_k",
    ),
    (
        "diffusers",
        "time_caption_embed.caption_embedder.1.weight",
        "x_embedder.weight",
        "attn.to_q.weight",
        "attn.norm_k",
    ),
)


def classify_lumina2(view: KeyView) -> list[Match]:
    """Lumina 2 and Z-Image (one network, Next-DiT, in two forms): Z-Image's blocks project the
    timestep without a SiLU (``adaLN_modulation.0``; Lumina 2's ``adaLN_modulation.1``, diffusers'
    ``norm1.linear``), which tells them apart at any width."""
    found = next(
        (
            row
            for row in _LUMINA_LAYOUTS
            if all(
                k in view for k in (row[1], row[2], f"noise_refiner.0.{row[4]}.weight", f"layers.0.{row[3]}")
            )
        ),
        None,
    )
    if found is None:
        return []
    layout, cap, x, qkv, norm = found
    head_key = f"noise_refiner.0.{norm}.weight"
    w = view.shape(cap) or (0, 0)
    head_dim = view.dim(head_key, 0)
    family = "z-image" if "layers.0.adaLN_modulation.0.weight" in view else "lumina2"
    fields = {
        "dim": w[0],
        "cap_feat_dim": w[1],
        "head_dim": head_dim,
        "n_heads": w[0] // head_dim if head_dim else None,
        "n_layers": count_numbered(view, "layers.", (qkv, "attention_norm1.weight", "norm1.norm.weight")),
        "n_refiner_layers": count_numbered(view, "noise_refiner.", (qkv,)),
        "in_channels": (view.dim(x, 1) or 0) // 4,
        "patch_size": 2,
        "pad_tokens": "cap_pad_token" in view,
    }
    warnings = [] if w[0] == LUMINA_DIMS[family] else [f"unusual {family} width {w[0]}"]
    probes = (f"layers.0.{qkv}", "layers.0.feed_forward.w1.weight", "layers.0.feed_forward.linear_1.weight")
    return [finish(view, family, layout=layout, probes=probes, fields=fields, warnings=warnings)]


# -- HiDream ------------------------------------------------------------------------------------------
def classify_hidream(view: KeyView) -> list[Match]:
    if (
        "caption_projection.0.linear.weight" not in view
        or "double_stream_blocks.0.block.adaLN_modulation.1.weight" not in view
    ):
        return []
    x = view.shape("x_embedder.proj.weight") or (0, 0)
    fields: dict[str, Any] = {
        "hidden_size": x[0],
        "in_channels": x[1] // 4 if len(x) == 2 else None,
        "num_layers": count_numbered(view, "double_stream_blocks.", ("block.adaLN_modulation.1.weight",)),
        "num_single_layers": count_numbered(
            view, "single_stream_blocks.", ("block.adaLN_modulation.1.weight",)
        ),
        "num_routed_experts": count_numbered(
            view, "double_stream_blocks.0.block.ff_i.experts.", ("w1.weight",)
        ),
        "pooled_dim": view.dim("p_embedder.pooled_embedder.linear_1.weight", 1),
    }
    probes = ("double_stream_blocks.0.block.attn1.to_q.weight",)
    fields["ambiguous_variants"] = ["full", "dev", "fast"]
    warnings = ["HiDream-I1 full, dev and fast have the same shapes: the file name or metadata decides"]
    return [finish(view, "hidream", layout="original", probes=probes, fields=fields, warnings=warnings)]


# -- Qwen-Image ---------------------------------------------------------------------------------------
def classify_qwen_image(view: KeyView) -> list[Match]:
    needed = ("txt_norm.weight", "img_in.weight", "transformer_blocks.0.img_mod.1.weight")
    if not view.has_all(needed) or "transformer_blocks.0.img_mlp.w1.weight" in view:
        return []
    img_in = view.shape("img_in.weight") or (0, 0)
    fields: dict[str, Any] = {
        "hidden_size": img_in[0],
        "in_channels": img_in[1],
        "num_layers": count_numbered(view, "transformer_blocks.", ("img_mod.1.weight",)),
        "context_dim": view.dim("txt_norm.weight", 0),
        "out_channels": view.dim("proj_out.weight", 0),
    }
    warnings = (
        []
        if fields["context_dim"] == 3584
        else [f"text width {fields['context_dim']} is not Qwen2.5-VL's 3584"]
    )
    probes = ("transformer_blocks.0.attn.to_q.weight", "transformer_blocks.0.img_mlp.net.0.proj.weight")
    if "__index_timestep_zero__" in view:  # Comfy-Org's marker of Edit 2511 (ComfyUI's model_detection)
        family = "qwen-image-edit-2511"
    else:  # Qwen-Image, 2512 and Edit 2509 have the same keys: a file name may tell
        family = "qwen-image"
        fields["ambiguous_with"] = ["qwen-image-edit", "qwen-image-edit-2508", "qwen-image-edit-2511"]
    return [finish(view, family, layout="original", probes=probes, fields=fields, warnings=warnings)]
