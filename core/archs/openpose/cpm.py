"""OpenPose's hand and face networks (single-branch convolutional pose machines, as lllyasviel's
``hand_pose_model.pth`` and ``facenet.pth`` hold them): the same network with 22 heatmaps (the
hand's 21 keypoints and the background) or 71 (the face's 70 and the background). A VGG-19 trunk to
conv5_2 and ``conv5_3_CPM`` (128 wide, 1/8 of the picture), stage 1 (``conv6_1_CPM``,
``conv6_2_CPM``), then stages 2..6 that each see the previous stage's heatmaps and the trunk's map
(heatmaps first) through five 7x7 convolutions and two 1x1. Every convolution is followed by a ReLU
except each stage's last.

Module names follow controlnet_aux's ``handpose_model`` (``model1_0`` the trunk, ``model1_1``
stage 1, ``model2`` .. ``model6``), whose layers carry the files' own names; its ``FaceNet`` holds
the same layers at the top level (the file's keys)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.archs.openpose.net import conv_layers

#: the trunk: (name, in, out, kernel) for a convolution, (name, 0, 0, 2) for a 2x2 max pool
TRUNK = (
    ("conv1_1", 3, 64, 3), ("conv1_2", 64, 64, 3), ("pool1_stage1", 0, 0, 2),
    ("conv2_1", 64, 128, 3), ("conv2_2", 128, 128, 3), ("pool2_stage1", 0, 0, 2),
    ("conv3_1", 128, 256, 3), ("conv3_2", 256, 256, 3), ("conv3_3", 256, 256, 3),
    ("conv3_4", 256, 256, 3), ("pool3_stage1", 0, 0, 2),
    ("conv4_1", 256, 512, 3), ("conv4_2", 512, 512, 3), ("conv4_3", 512, 512, 3),
    ("conv4_4", 512, 512, 3), ("conv5_1", 512, 512, 3), ("conv5_2", 512, 512, 3),
    ("conv5_3_CPM", 512, 128, 3),
)  # fmt: skip
HAND_PARTS = 22
FACE_PARTS = 71


@dataclass(frozen=True)
class CPMConfig:
    stages: int = 6  # stage 1 and the refinement stages 2..stages
    parts: int = HAND_PARTS  # heatmaps: 22 (hand) or 71 (face)
    width: int = 128  # the trunk's map and every stage's inner width


def block_name(stage: int) -> str:
    """The module block holding ``stage``'s layers (0: the trunk)."""
    return {0: "model1_0", 1: "model1_1"}.get(stage, f"model{stage}")


def stage_spec(cfg: CPMConfig, stage: int) -> list[tuple[str, int, int, int]]:
    w = cfg.width
    if stage == 1:
        return [("conv6_1_CPM", w, 512, 1), ("conv6_2_CPM", 512, cfg.parts, 1)]
    tag = f"stage{stage}"
    return [
        (f"Mconv1_{tag}", cfg.parts + w, w, 7), *((f"Mconv{i}_{tag}", w, w, 7) for i in range(2, 6)),
        (f"Mconv6_{tag}", w, w, 1), (f"Mconv7_{tag}", w, cfg.parts, 1),
    ]  # fmt: skip


class OpenPoseCPM(nn.Module):
    """(B, 3, H, W) pictures, BGR in [-0.5, 0.5) -> the last stage's heatmaps (B, parts, H/8, W/8)."""

    def __init__(self, cfg: CPMConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.model1_0 = conv_layers(list(TRUNK), True, device)
        for t in range(1, cfg.stages + 1):
            setattr(self, block_name(t), conv_layers(stage_spec(cfg, t), False, device))

    def forward(self, x: Tensor) -> Tensor:
        trunk = self.model1_0(x)
        heat = getattr(self, block_name(1))(trunk)
        for t in range(2, self.config.stages + 1):
            heat = getattr(self, block_name(t))(torch.cat([heat, trunk], 1))
        out: Tensor = heat
        return out
