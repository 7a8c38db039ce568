"""FLUX.2 transformers from shapes: klein 4B, klein 9B and dev, in Black Forest Labs' / ComfyUI's
naming (``double_stream_modulation_img.lin.weight``, ``double_blocks.N.img_attn.qkv.weight``) and
diffusers' (``Flux2Transformer2DModel``: ``double_stream_modulation_img.linear.weight``,
``single_transformer_blocks.N.attn.to_qkv_mlp_proj.weight``).

The width decides the variant (klein 4B 3072, klein 9B 4096, dev 6144; the text width follows: 3 x
the encoder's, 7680 / 12288 / 15360); dev alone has a guidance embedder. klein's base (undistilled)
checkpoints have their distilled siblings' shapes: only the file name tells them apart.
"""

from __future__ import annotations

from typing import Any

from core.detect.diffusion_probe import count_numbered, finish, is_controlnet
from core.detect.keyview import KeyView
from core.detect.registry import Match

FLUX2_PROBES = (
    "double_blocks.0.img_attn.qkv.weight",
    "single_blocks.0.linear1.weight",
    "transformer_blocks.0.attn.to_q.weight",
    "single_transformer_blocks.0.attn.to_qkv_mlp_proj.weight",
)
#: hidden width -> (family, text width)
FLUX2_WIDTHS = {3072: ("flux2-klein-4b", 7680), 4096: ("flux2-klein-9b", 12288), 6144: ("flux2-dev", 15360)}


def _fields(view: KeyView) -> tuple[str, dict[str, Any]] | None:
    if "double_stream_modulation_img.lin.weight" in view and "img_in.weight" in view:
        x, ctx = view.shape("img_in.weight") or (0, 0), view.dim("txt_in.weight", 1)
        depth = count_numbered(view, "double_blocks.", ("img_attn.qkv.weight",))
        single = count_numbered(view, "single_blocks.", ("linear1.weight",))
        guidance = "guidance_in.in_layer.weight" in view
        return "original", {"hidden_size": x[0], "in_channels": x[1], "context_in_dim": ctx, "depth": depth,
                            "depth_single_blocks": single, "guidance_embed": guidance}  # fmt: skip
    if "double_stream_modulation_img.linear.weight" in view and "x_embedder.weight" in view:
        x, ctx = view.shape("x_embedder.weight") or (0, 0), view.dim("context_embedder.weight", 1)
        depth = count_numbered(view, "transformer_blocks.", ("attn.to_q.weight",))
        single = count_numbered(view, "single_transformer_blocks.", ("attn.to_qkv_mlp_proj.weight",))
        guidance = "time_guidance_embed.guidance_embedder.linear_1.weight" in view
        return "diffusers", {"hidden_size": x[0], "in_channels": x[1], "context_in_dim": ctx, "depth": depth,
                             "depth_single_blocks": single, "guidance_embed": guidance}  # fmt: skip
    return None


def classify_flux2(view: KeyView) -> list[Match]:
    """FLUX.2 klein 4B / 9B / dev."""
    if is_controlnet(view):
        return []
    read = _fields(view)
    if read is None:
        return []
    layout, fields = read
    fields["num_heads"] = fields["hidden_size"] // 128
    fields["patch_size"] = 1
    warnings: list[str] = []
    family, text_width = FLUX2_WIDTHS.get(fields["hidden_size"], ("", 0))
    if fields["guidance_embed"]:
        family = "flux2-dev"
    elif not family or family == "flux2-dev":
        family = "flux2-klein-4b" if fields["hidden_size"] < 4096 else "flux2-klein-9b"
        warnings.append(f"unusual FLUX.2 width {fields['hidden_size']} (klein 4B 3072, 9B 4096, dev 6144)")
    if text_width and fields["context_in_dim"] != text_width:
        warnings.append(f"text width {fields['context_in_dim']}, not the {text_width} its encoder gives")
    if fields["in_channels"] != 128:
        warnings.append(f"{fields['in_channels']} input channels, not 128")
    return [finish(view, family, layout=layout, probes=FLUX2_PROBES, fields=fields, warnings=warnings)]
