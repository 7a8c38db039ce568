"""Preprocessor model files (the networks that make a ControlNet hint from a picture), from names and
shapes only: Depth Anything V2 in its original layout (the files comfyui_controlnet_aux loads) and
in transformers' ``DepthAnythingForDepthEstimation`` layout; OpenPose's body network
(``body_pose_model.pth``: its layers at the top level, or under the network's ``model0`` ...
blocks); and OpenPose's hand and face networks (``hand_pose_model.pth``, ``facenet.pth``: the same
layers, told apart by their number of heatmaps, 22 or 71; at the top level or under the network's
``model1_0`` ... blocks)."""

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


#: the body network's telling layers: (key in the original layout, the block holding it)
_BODY = (("conv1_1", "model0"), ("conv4_4_CPM", "model0"), ("conv5_5_CPM_L1", "model1_1"),
         ("conv5_5_CPM_L2", "model1_2"))  # fmt: skip
#: the hand and face networks' telling layers: (key in the original layout, the block holding it)
_CPM = (("conv1_1", "model1_0"), ("conv5_3_CPM", "model1_0"), ("conv6_2_CPM", "model1_1"))
_CPM_FAMILIES = {22: "openpose-hand", 71: "openpose-face"}


def match_openpose_body(view: KeyView) -> Match | None:
    for layout in ("original", "module"):

        def key(name: str, block: str, layout: str = layout) -> str:
            return f"{name}.weight" if layout == "original" else f"{block}.{name}.weight"

        if not view.has_all(key(n, b) for n, b in _BODY):
            continue
        stages = 1
        while key(f"Mconv1_stage{stages + 1}_L1", f"model{stages + 1}_1") in view:
            stages += 1
        parts = view.dim(key("conv5_5_CPM_L2", "model1_2"), 0)
        return Match("openpose-body", layout=layout, fields={"stages": stages, "parts": parts})
    return None


def match_openpose_cpm(view: KeyView) -> Match | None:
    """OpenPose's hand (22 heatmaps) or face (71) network."""
    for layout in ("original", "module"):

        def key(name: str, block: str, layout: str = layout) -> str:
            return f"{name}.weight" if layout == "original" else f"{block}.{name}.weight"

        if not view.has_all(key(n, b) for n, b in _CPM):
            continue
        parts = view.dim(key("conv6_2_CPM", "model1_1"), 0)
        family = _CPM_FAMILIES.get(parts or 0)
        if family is None:
            return None
        stages = 1
        while key(f"Mconv1_stage{stages + 1}", f"model{stages + 1}") in view:
            stages += 1
        return Match(family, layout=layout, fields={"stages": stages, "parts": parts})
    return None


def match_openpose_hand(view: KeyView) -> Match | None:
    found = match_openpose_cpm(view)
    return found if found is not None and found.family == "openpose-hand" else None


def match_openpose_face(view: KeyView) -> Match | None:
    found = match_openpose_cpm(view)
    return found if found is not None and found.family == "openpose-face" else None
