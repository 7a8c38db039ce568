"""OpenPose body (a preprocessor network: picture -> part heatmaps and limb affinity fields): the
network from op layers (:mod:`.net`) and the two file layouts it is read from (:mod:`.keys`). The
keypoints and the skeleton drawing are :mod:`core.preprocess.pose`'s."""

from __future__ import annotations

from typing import Any

from torch import nn

from core.archs.openpose.keys import config_from_shapes, file_shapes_as_module, sources
from core.archs.openpose.net import STRIDE, OpenPoseBody, OpenPoseConfig
from core.archs.preprocessors import PreprocessorNet


def _build(cfg: Any, device: str) -> nn.Module:
    return OpenPoseBody(cfg, device=device)


def activation_bytes(cfg: OpenPoseConfig, height: int, width: int) -> int:
    """A float32 run's largest live tensors: the first convolutions' two 64-wide maps at full size,
    or a stage's input, two inner maps and outputs at 1/8 with the trunk's map kept."""
    full = 2 * 64 * height * width
    small = (height // STRIDE + 1) * (width // STRIDE + 1)
    stage = small * (3 * (cfg.pafs + cfg.parts + cfg.width) + 2 * 512)
    return 4 * 2 * max(full, stage)


PREPROCESSOR = PreprocessorNet(
    "openpose-body", "OpenPose body", config_from_shapes, _build, sources,
    file_shapes_as_module, activation_bytes,
)  # fmt: skip

__all__ = ["PREPROCESSOR", "OpenPoseBody", "OpenPoseConfig"]
