"""OpenPose (preprocessor networks): the body network (picture -> part heatmaps and limb affinity
fields, :mod:`.net`) and the hand and face networks (picture -> keypoint heatmaps, :mod:`.cpm`),
from op layers, and the two file layouts they are read from (:mod:`.keys`). The keypoints and the
drawing are :mod:`core.preprocess.pose`'s, :mod:`core.preprocess.pose_hands`' and
:mod:`core.preprocess.pose_draw`'s."""

from __future__ import annotations

from typing import Any

from torch import nn

from core.archs.openpose.cpm import FACE_PARTS, HAND_PARTS, CPMConfig, OpenPoseCPM
from core.archs.openpose.keys import (
    config_from_shapes,
    cpm_config_from_shapes,
    file_shapes_as_module,
    sources,
)
from core.archs.openpose.net import STRIDE, OpenPoseBody, OpenPoseConfig
from core.archs.preprocessors import PreprocessorNet


def _build(cfg: Any, device: str) -> nn.Module:
    return OpenPoseBody(cfg, device=device)


def _build_cpm(cfg: Any, device: str) -> nn.Module:
    return OpenPoseCPM(cfg, device=device)


def activation_bytes(cfg: OpenPoseConfig, height: int, width: int) -> int:
    """A float32 run's largest live tensors: the first convolutions' two 64-wide maps at full size,
    or a stage's input, two inner maps and outputs at 1/8 with the trunk's map kept."""
    full = 2 * 64 * height * width
    small = (height // STRIDE + 1) * (width // STRIDE + 1)
    stage = small * (3 * (cfg.pafs + cfg.parts + cfg.width) + 2 * 512)
    return 4 * 2 * max(full, stage)


def cpm_activation_bytes(cfg: CPMConfig, height: int, width: int) -> int:
    """As the body's: the first two 64-wide maps at full size, or at 1/8 the trunk's two 512-wide
    maps, or a stage's input, two inner maps, output and the trunk's map kept."""
    full = 2 * 64 * height * width
    small = (height // STRIDE + 1) * (width // STRIDE + 1)
    stage = small * max(2 * 512 + cfg.width, 2 * (cfg.parts + cfg.width) + 3 * cfg.width)
    return 4 * 2 * max(full, stage)


PREPROCESSOR = (
    PreprocessorNet(
        "openpose-body", "OpenPose body", config_from_shapes, _build, sources,
        file_shapes_as_module, activation_bytes,
    ),
    PreprocessorNet(
        "openpose-hand", "OpenPose hand", cpm_config_from_shapes, _build_cpm, sources,
        file_shapes_as_module, cpm_activation_bytes,
    ),
    PreprocessorNet(
        "openpose-face", "OpenPose face", cpm_config_from_shapes, _build_cpm, sources,
        file_shapes_as_module, cpm_activation_bytes,
    ),
)  # fmt: skip

__all__ = [
    "FACE_PARTS", "HAND_PARTS", "PREPROCESSOR", "CPMConfig", "OpenPoseBody", "OpenPoseCPM", "OpenPoseConfig",
]  # fmt: skip
