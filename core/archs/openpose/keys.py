"""Where each weight of :class:`~.net.OpenPoseBody` and :class:`~.cpm.OpenPoseCPM` (the hand and
face networks) lives in the two layouts their files come in:

* ``original``: lllyasviel's ``body_pose_model.pth``, ``hand_pose_model.pth`` and ``facenet.pth``
  (lllyasviel/Annotators, what controlnet_aux and comfyui_controlnet_aux load) and their
  safetensors conversions: every layer under its own name at the top level (``conv1_1.weight``,
  ``Mconv7_stage6_L2.bias``, ``conv6_2_CPM.weight``);
* ``module``: the network's own state dict saved as it is (``model0.conv1_1.weight``,
  ``model6_2.Mconv7_stage6_L2.bias``; ``model1_0.conv1_1.weight``, ``model6.Mconv7_stage6.bias``).
"""

from __future__ import annotations

from collections.abc import Mapping

from core.archs.openpose.cpm import CPMConfig, block_name
from core.archs.openpose.net import OpenPoseConfig

Shapes = Mapping[str, tuple[int, ...]]
Source = tuple[str, int | None]


def _key(name: str, layout: str, block: str) -> str:
    return name if layout == "original" else f"{block}.{name}"


def config_from_shapes(shapes: Shapes, layout: str) -> OpenPoseConfig:
    """The network a file holds, from its shapes (KeyError when it is not complete)."""
    stages = 1
    while _key(f"Mconv1_stage{stages + 1}_L1.weight", layout, f"model{stages + 1}_1") in shapes:
        stages += 1
    pafs = shapes[_key("conv5_5_CPM_L1.weight", layout, "model1_1")][0]
    parts = shapes[_key("conv5_5_CPM_L2.weight", layout, "model1_2")][0]
    width = shapes[_key("conv4_4_CPM.weight", layout, "model0")][0]
    return OpenPoseConfig(stages=stages, pafs=pafs, parts=parts, width=width)


def cpm_config_from_shapes(shapes: Shapes, layout: str) -> CPMConfig:
    """The hand or face network a file holds, from its shapes (KeyError when it is not complete)."""
    stages = 1
    while _key(f"Mconv1_stage{stages + 1}.weight", layout, block_name(stages + 1)) in shapes:
        stages += 1
    parts = shapes[_key("conv6_2_CPM.weight", layout, block_name(1))][0]
    width = shapes[_key("conv5_3_CPM.weight", layout, block_name(0))][0]
    return CPMConfig(stages=stages, parts=parts, width=width)


def sources(cfg: OpenPoseConfig | CPMConfig, layout: str, module_keys: list[str]) -> dict[str, Source]:
    """Module key -> (file key, None) for every key of the module."""
    if layout != "original":
        return {k: (k, None) for k in module_keys}
    return {k: (k.split(".", 1)[1], None) for k in module_keys}


def file_shapes_as_module(
    shapes: Shapes, mapped: Mapping[str, Source], layout: str
) -> dict[str, tuple[int, ...]]:
    """The file's shapes under the module's names, plus the file keys no source names, under their
    own names (for the key-by-key comparison)."""
    out = {mine: tuple(shapes[key]) for mine, (key, _part) in mapped.items() if key in shapes}
    used = {key for key, _part in mapped.values()}
    return out | {k: tuple(s) for k, s in shapes.items() if k not in used}
