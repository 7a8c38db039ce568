"""Preprocessor model files (the networks that make a ControlNet hint from a picture), from names and
shapes only: Depth Anything V2 in its original layout (the files comfyui_controlnet_aux loads) and
in transformers' ``DepthAnythingForDepthEstimation`` layout."""

from __future__ import annotations

from core.detect.keyview import KeyView
from core.detect.registry import Match

#: transformer width -> the size's name in the file names (depth_anything_v2_vits ...)
_SIZES = {384: "vits", 768: "vitb", 1024: "vitl", 1536: "vitg"}
_ORIGINAL = (
    "pretrained.pos_embed",
    "pretrained.patch_embed.proj.weight",
    "depth_head.scratch.output_conv1.weight",
)
_TRANSFORMERS = (
    "backbone.embeddings.position_embeddings",
    "backbone.embeddings.patch_embeddings.projection.weight",
    "neck.fusion_stage.layers.0.projection.weight",
    "head.conv1.weight",
)


def match_depth_anything(view: KeyView) -> Match | None:
    if view.has_all(_ORIGINAL):
        layout, table, blocks = "original", "pretrained.pos_embed", "pretrained.blocks."
    elif view.has_all(_TRANSFORMERS):
        layout, table, blocks = (
            "transformers",
            "backbone.embeddings.position_embeddings",
            "backbone.encoder.layer.",
        )
    else:
        return None
    width = view.dim(table, 2)
    if width is None:
        return None
    size = _SIZES.get(width)
    warnings = () if size is not None else (f"a {width}-wide transformer is none of the released sizes",)
    return Match(
        "depth-anything-v2",
        layout=layout,
        variant=size,
        fields={"width": width, "blocks": view.count_blocks(blocks)},
        warnings=warnings,
    )
