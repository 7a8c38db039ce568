"""The OpenPose body network (CMU's two-branch convolutional pose machine, as lllyasviel's
``body_pose_model.pth`` holds it): a VGG-19 trunk to a 128-wide feature map at 1/8 of the picture,
then stages that each see the trunk's map and the previous stage's two outputs: part affinity
fields (38 channels: x and y of 19 limbs, the ``L1`` branch) and part heatmaps (19: 18 parts and
the background, the ``L2`` branch). Built from Loadout's op layers (cast at forward, placed and
streamed by the memory manager).

Module names follow the reference's (``model0`` the trunk, ``model{t}_1`` / ``model{t}_2`` the
branches of stage t), whose layers carry the file's own names (``conv1_1``, ``Mconv7_stage6_L2``).
Every convolution is followed by a ReLU except the last of each branch; as in the reference
network (its list of such layers names ``Mconv7_stage6_L1`` twice and not ``Mconv7_stage6_L2``),
the final heatmap layer keeps its ReLU, so the heatmaps are never negative.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core import ops

#: the trunk: (name, in, out, kernel) for a convolution, (name, 0, 0, 2) for a 2x2 max pool
TRUNK = (
    ("conv1_1", 3, 64, 3), ("conv1_2", 64, 64, 3), ("pool1_stage1", 0, 0, 2),
    ("conv2_1", 64, 128, 3), ("conv2_2", 128, 128, 3), ("pool2_stage1", 0, 0, 2),
    ("conv3_1", 128, 256, 3), ("conv3_2", 256, 256, 3), ("conv3_3", 256, 256, 3),
    ("conv3_4", 256, 256, 3), ("pool3_stage1", 0, 0, 2),
    ("conv4_1", 256, 512, 3), ("conv4_2", 512, 512, 3), ("conv4_3_CPM", 512, 256, 3),
    ("conv4_4_CPM", 256, 128, 3),
)  # fmt: skip
STRIDE = 8  # three 2x2 pools


@dataclass(frozen=True)
class OpenPoseConfig:
    stages: int = 6  # stage 1 and the refinement stages 2..stages
    pafs: int = 38  # the L1 branch's outputs: x and y of each limb's affinity field
    parts: int = 19  # the L2 branch's outputs: 18 parts and the background
    width: int = 128  # the trunk's map and every stage's inner width


def conv_layers(
    spec: list[tuple[str, int, int, int]], last_relu: bool, device: torch.device | str | None
) -> nn.Sequential:
    layers: list[tuple[str, nn.Module]] = []
    for i, (name, cin, cout, k) in enumerate(spec):
        if cin == 0:
            layers.append((name, nn.MaxPool2d(kernel_size=k, stride=k, padding=0)))
            continue
        layers.append((name, ops.Conv2d(cin, cout, k, padding=k // 2, device=device)))
        if i < len(spec) - 1 or last_relu:
            layers.append((f"relu_{name}", nn.ReLU()))
    return nn.Sequential(OrderedDict(layers))


def stage_spec(cfg: OpenPoseConfig, stage: int, branch: int) -> list[tuple[str, int, int, int]]:
    """The layers of ``stage``'s branch 1 (affinity fields) or 2 (heatmaps)."""
    out = cfg.pafs if branch == 1 else cfg.parts
    w = cfg.width
    if stage == 1:
        tag = f"CPM_L{branch}"
        return [
            (f"conv5_1_{tag}", w, w, 3), (f"conv5_2_{tag}", w, w, 3), (f"conv5_3_{tag}", w, w, 3),
            (f"conv5_4_{tag}", w, 512, 1), (f"conv5_5_{tag}", 512, out, 1),
        ]  # fmt: skip
    cin = cfg.pafs + cfg.parts + w
    tag = f"stage{stage}_L{branch}"
    return [
        (f"Mconv1_{tag}", cin, w, 7), *((f"Mconv{i}_{tag}", w, w, 7) for i in range(2, 6)),
        (f"Mconv6_{tag}", w, w, 1), (f"Mconv7_{tag}", w, out, 1),
    ]  # fmt: skip


class OpenPoseBody(nn.Module):
    """(B, 3, H, W) pictures, BGR in [-0.5, 0.5), H and W multiples of 8 -> (affinity fields
    (B, 38, H/8, W/8), heatmaps (B, 19, H/8, W/8)) of the last stage."""

    def __init__(self, cfg: OpenPoseConfig, *, device: torch.device | str | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.model0 = conv_layers(list(TRUNK), True, device)
        for t in range(1, cfg.stages + 1):
            for branch in (1, 2):
                last_relu = t == cfg.stages and branch == 2  # the reference's kept ReLU
                layers = conv_layers(stage_spec(cfg, t, branch), last_relu, device)
                setattr(self, f"model{t}_{branch}", layers)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        trunk = self.model0(x)
        features = trunk
        pafs = heat = trunk
        for t in range(1, self.config.stages + 1):
            pafs = getattr(self, f"model{t}_1")(features)
            heat = getattr(self, f"model{t}_2")(features)
            features = torch.cat([pafs, heat, trunk], 1)
        return pafs, heat
