"""Video diffusion transformers from shapes: Wan 2.1 / 2.2, HunyuanVideo, LTX-Video."""

from __future__ import annotations

from typing import Any

from core.detect.diffusion_probe import alternative, count_numbered, finish
from core.detect.keyview import KeyView
from core.detect.registry import Match

# -- Wan ----------------------------------------------------------------------------------------------
WAN_SIZES = {1536: "1.3B", 3072: "5B", 5120: "14B"}


def _wan_read(view: KeyView) -> tuple[str, dict[str, Any], bool] | None:
    """(layout, fields, has CLIP-vision image embedding)."""
    pe = view.shape("patch_embedding.weight")
    if pe is None:
        return None
    if "head.modulation" in view:
        layout, ffn, head, blk = "original", "blocks.0.ffn.0.weight", "head.head.weight", "self_attn.q.weight"
        image = "img_emb.proj.1.weight" in view
        flf = "img_emb.emb_pos" in view
    elif "condition_embedder.time_embedder.linear_1.weight" in view and "blocks.0.attn1.to_q.weight" in view:
        layout, ffn, head, blk = (
            "diffusers",
            "blocks.0.ffn.net.0.proj.weight",
            "proj_out.weight",
            "attn1.to_q.weight",
        )
        image = "condition_embedder.image_embedder.norm1.weight" in view
        flf = "condition_embedder.image_embedder.pos_embed" in view
    else:
        return None
    vace = view.has_any(("vace_patch_embedding.weight", "vace_blocks.0.after_proj.weight"))
    model_type = "vace" if vace else "flf2v" if flf else "i2v" if image or pe[1] == 36 else "t2v"
    if pe[1] == 48:
        model_type = "ti2v"  # Wan 2.2 5B: text and image to video in one model
    fields: dict[str, Any] = {
        "dim": pe[0],
        "in_dim": pe[1],
        "out_dim": (view.dim(head, 0) or 0) // 4,
        "ffn_dim": view.dim(ffn, 0),
        "num_layers": count_numbered(view, "blocks.", (blk,)),
        "num_heads": pe[0] // 128,
        "patch_size": list(pe[2:]),
        "model_type": model_type,
        "size": WAN_SIZES.get(pe[0]),
    }
    return layout, fields, image


def classify_wan(view: KeyView) -> list[Match]:
    """Wan 2.1 or 2.2; the 14B text-to-video models of both have identical shapes (ambiguous)."""
    read = _wan_read(view)
    if read is None:
        return []
    layout, fields, image = read
    probes = ("blocks.0.self_attn.q.weight", "blocks.0.attn1.to_q.weight")
    warnings: list[str] = []
    if fields["in_dim"] == 48 or fields["dim"] == 3072:
        family, alt = "wan2.2", None  # TI2V-5B with the 48-channel Wan 2.2 VAE
    elif fields["dim"] == 1536 or image:
        family, alt = "wan2.1", None  # 1.3B exists only in 2.1; 2.2 dropped the CLIP image embedding
    elif fields["in_dim"] == 36:
        family, alt = "wan2.2", "wan2.1"
        warnings.append("image-to-video without CLIP image embedding: Wan 2.2 A14B (or a 2.1 derivative)")
    else:
        family, alt = "wan2.1", "wan2.2"
        warnings.append(
            "Wan 2.1 and Wan 2.2 14B text-to-video models have the same shapes: the file name decides"
        )
    if alt:
        fields["ambiguous_with"] = [alt]
    primary = finish(
        view,
        family,
        layout=layout,
        probes=probes,
        fields=fields,
        warnings=warnings,
        score=0.6 if alt else 1.0,
    )
    return [primary, alternative(primary, alt)] if alt else [primary]


# -- HunyuanVideo -------------------------------------------------------------------------------------
def classify_hunyuan_video(view: KeyView) -> list[Match]:
    guidance: tuple[str, ...]
    if "txt_in.individual_token_refiner.blocks.0.norm1.weight" in view and "img_in.proj.weight" in view:
        layout, x, ctx = "original", "img_in.proj.weight", "txt_in.input_embedder.weight"
        depth = count_numbered(view, "double_blocks.", ("img_attn_qkv.weight", "img_attn.qkv.weight"))
        single = count_numbered(view, "single_blocks.", ("linear1.weight",))
        vec, guidance = (
            "vector_in.in_layer.weight",
            ("guidance_in.mlp.0.weight", "guidance_in.in_layer.weight"),
        )
    elif (
        "context_embedder.token_refiner.refiner_blocks.0.norm1.weight" in view
        and "x_embedder.proj.weight" in view
    ):
        layout, x, ctx = "diffusers", "x_embedder.proj.weight", "context_embedder.proj_in.weight"
        depth = count_numbered(view, "transformer_blocks.", ("attn.to_q.weight",))
        single = count_numbered(view, "single_transformer_blocks.", ("attn.to_q.weight",))
        vec, guidance = (
            "time_text_embed.text_embedder.linear_1.weight",
            ("time_text_embed.guidance_embedder.linear_1.weight",),
        )
    else:
        return []
    w = view.shape(x) or (0, 0)
    fields = {
        "hidden_size": w[0],
        "in_channels": w[1],
        "patch_size": list(w[2:]),
        "depth": depth,
        "depth_single_blocks": single,
        "context_in_dim": view.dim(ctx, 1),
        "vec_in_dim": view.dim(vec, 1),
        "guidance_embed": view.has_any(guidance),
        "num_heads": w[0] // 128,
    }
    probes = (
        "double_blocks.0.img_attn_qkv.weight",
        "double_blocks.0.img_attn.qkv.weight",
        "transformer_blocks.0.attn.to_q.weight",
    )
    return [finish(view, "hunyuan-video", layout=layout, probes=probes, fields=fields)]


# -- LTX-Video ----------------------------------------------------------------------------------------
LTXV_SIZES = {2048: "2B", 4096: "13B"}


def classify_ltxv(view: KeyView) -> list[Match]:
    if view.has_any(
        (
            "audio_adaln_single.linear.weight",
            "av_ca_a2v_gate_adaln_single.emb.timestep_embedder.linear_1.weight",
        )
    ):
        return []  # LTX-2 (audio + video): another architecture
    if "adaln_single.emb.timestep_embedder.linear_1.weight" in view and "patchify_proj.weight" in view:
        layout, proj = "original", "patchify_proj.weight"
    elif "time_embed.emb.timestep_embedder.linear_1.weight" in view and "proj_in.weight" in view:
        if "transformer_blocks.0.attn1.norm_q.weight" not in view:
            return []
        layout, proj = "diffusers", "proj_in.weight"
    else:
        return []
    w = view.shape(proj) or (0, 0)
    fields = {
        "hidden_size": w[0],
        "in_channels": w[1],
        "num_layers": count_numbered(view, "transformer_blocks.", ("attn1.to_q.weight", "scale_shift_table")),
        "cross_attention_dim": view.dim("transformer_blocks.0.attn2.to_k.weight", 1),
        "caption_channels": view.dim("caption_projection.linear_1.weight", 1),
        "size": LTXV_SIZES.get(w[0]),
    }
    probes = ("transformer_blocks.0.attn1.to_q.weight", "transformer_blocks.0.ff.net.0.proj.weight")
    return [finish(view, "ltxv", layout=layout, probes=probes, fields=fields)]
