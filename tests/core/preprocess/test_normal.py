"""The normal map from Depth Anything V2's depth: the method of controlnet_aux's MidasDetector
(``depth_and_normal``) in NormalBAE's channel order, proven against the aux's own code for the same
depth, then made from a picture with a Depth Anything V2 file (real vits widths, four random
blocks) through the memory manager."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.memory.devices import device_named
from core.preprocess import find_preprocessor, preprocess
from core.preprocess import normal as normal_mod
from core.preprocess.depth import network_input
from core.preprocess.placed import PreprocessorModels, model_files, model_run
from core.session.placement import Placement, PlacementConfig
from tests.fixtures.controlnet_aux import aux
from tests.fixtures.depth_anything import depth_files
from tests.fixtures.drawn import landscape


class DepthField(torch.nn.Module):
    """A depth network whose depth is a ball in front of a tilted wall (near is larger), at any size:
    a run through the aux's MidasDetector hands its normal step exactly this depth."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(()), requires_grad=False)  # the aux asks its device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape[-2:]
        gy, gx = torch.meshgrid(torch.linspace(-1, 1, rows), torch.linspace(-1, 1, cols), indexing="ij")
        wall = 2.0 + 0.8 * gx + 0.3 * gy
        ball = 1.5 * torch.sqrt(torch.clamp(0.25 - (gx - 0.2) ** 2 - gy**2, min=0.0))
        far = 4.0 * (gy < -0.7)  # a far band at the top: under the background threshold
        return ((wall + ball) * 20 * (1 - far / 4))[None] * self.gain


def test_the_normal_of_a_depth_equals_the_aux_midas_normal_in_normalbae_order() -> None:
    field = DepthField()
    detector = aux("midas").MidasDetector(field)
    picture = np.zeros((128, 192, 3), np.uint8)
    _depth, want = detector(picture, depth_and_normal=True, detect_resolution=128, image_resolution=128)
    relative = field(torch.zeros(1, 3, 128, 192))[0].numpy()
    got = normal_mod.from_depth(relative)
    assert np.array_equal(got, want[:, :, ::-1])  # the aux's MiDaS order is blue-left, red-front
    # NormalBAE's convention: facing the viewer is (127, 127, 255); the wall, nearer on the right
    # and lower down, faces left (red over 127) and up (green over 127)
    assert tuple(got[5, 100]) == (127, 127, 255)  # the far band: background
    r, g, b = (int(c) for c in got[100, 20])
    assert r > 127 and g > 127 and b > 200
    ball_left, ball_right = got[64, 96 + 19 - 30], got[64, 96 + 19 + 30]  # either side of the ball
    assert int(ball_left[0]) > 127 + 40 and int(ball_right[0]) < 127  # its left side faces left


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return depth_files(tmp_path_factory.mktemp("normal"))


def test_the_normal_map_of_a_picture_through_the_manager(files: dict[str, Path], tmp_path: Path) -> None:
    from PIL import Image

    with Image.open(landscape(tmp_path / "house.png", 72, 48)) as im:
        picture = np.asarray(im.convert("RGB"))
    settings = {"resolution": 140}
    record = find_preprocessor("normal")
    by_family = model_files([record], [], [(files["original"], "preprocessor_model", "depth-anything-v2")])
    small = Placement(device_named("cpu"), PlacementConfig(simulate_bytes=40 << 20), cpu_is_device=True)
    models = PreprocessorModels()
    made = preprocess("normal", picture, settings, model=model_run(small, models, by_family))
    assert made.shape == (48, 72, 3) and made.dtype == np.uint8
    # the same as the normal of the network's depth at the picture's size
    module = models.get(files["original"]).module
    with torch.no_grad():
        relative = module(network_input(picture, 140))[0]
    full = F.interpolate(relative[None, None], (48, 72), mode="bilinear", align_corners=True)[0, 0]
    assert np.array_equal(made, normal_mod.from_depth(full.numpy()))
    assert len(np.unique(made.reshape(-1, 3), axis=0)) > 10  # not flat
    assert any(e.model.endswith("preprocessor") for e in small.events.events())
    # the depth and normal preprocessors share the file
    assert model_files([record, find_preprocessor("depth")], [files["original"]], []) == {
        "depth-anything-v2": files["original"]
    }
