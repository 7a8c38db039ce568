"""OpenPose body from a model file, against controlnet_aux (the reference comfyui_controlnet_aux and
sd-webui-controlnet run): its ``bodypose_model`` at the real widths and six stages with random
weights, saved as lllyasviel's ``body_pose_model.pth`` holds it (and as safetensors in both
layouts); detected, checked key by key, loaded zero-copy, equal to the reference network; the
keypoints and the drawn map equal to ``OpenposeDetector``'s for the same network and picture; run
through the memory manager on a simulated small card; missing, pickled and ONNX files explained."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from app.cli import main
from core.detect.detector import detect
from core.errors import FileFormatError, LoadoutError, ModelMismatchError
from core.files import read_tensor_index
from core.generate.workflows import controlnet_parameter, controlnets_in
from core.loading.preprocessor import load_preprocessor
from core.memory.devices import device_named
from core.preprocess import find_preprocessor, preprocess, preprocessor_named
from core.preprocess import pose as pose_mod
from core.preprocess.placed import PreprocessorModels, model_files, model_run
from core.session.placement import Placement, PlacementConfig
from tests.fixtures.openpose import PoseField, aux_open_pose, body_files, reference_model, standing

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    return reference_model()


@pytest.fixture(scope="module")
def files(reference: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return body_files(tmp_path_factory.mktemp("openpose"), reference)


@pytest.mark.parametrize(
    ("name", "layout", "stages"),
    [
        ("original", "original", 6),
        ("stage1", "original", 1),
        ("module", "module", 1),
        ("pickle", "original", 1),
    ],
)
def test_detected_by_its_keys(files: dict[str, Path], name: str, layout: str, stages: int) -> None:
    det = detect(read_tensor_index(files[name]).tensors, {}, files[name].name)
    assert (det.kind, det.family, det.layout) == ("preprocessor_model", "openpose-body", layout)
    assert det.fields == {"stages": stages, "parts": 19}


def test_the_network_equals_controlnet_aux(reference: torch.nn.Module, files: dict[str, Path]) -> None:
    loaded = load_preprocessor(files["original"])
    assert loaded.family == "openpose-body" and loaded.config.stages == 6  # type: ignore[attr-defined]
    x = torch.rand(1, 3, 48, 40) - 0.5
    with torch.no_grad():
        want = reference(x)
        got = loaded.module(x)
    for w, g, channels in zip(want, got, (38, 19), strict=True):
        assert g.shape == (1, channels, 6, 5) and w.abs().max() > 0.1
        assert torch.allclose(g, w, atol=1e-5, rtol=1e-5), (g - w).abs().max()
    assert got[1].min() >= 0  # the reference keeps a ReLU after the last heatmap layer
    # filled zero-copy from the mapped file
    conv = loaded.module.model0.conv1_1.weight  # type: ignore[union-attr]
    assert torch.equal(conv, reference.model0.conv1_1.weight)
    assert conv.data_ptr() != reference.model0.conv1_1.weight.data_ptr()
    # the network's own names fill the same network
    module = load_preprocessor(files["module"]).module
    short = load_preprocessor(files["stage1"]).module
    assert module.config.stages == 1  # type: ignore[union-attr]
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(module(x), short(x), strict=True))


def _aux_detector(network: torch.nn.Module) -> Any:
    """controlnet_aux's OpenposeDetector (bodies only) whose ``Body`` runs ``network``."""
    open_pose = aux_open_pose()
    body_cls = importlib.import_module("controlnet_aux.open_pose.body").Body
    body = body_cls.__new__(body_cls)
    body.model = network
    return open_pose.OpenposeDetector(body)


def test_people_and_the_drawing_equal_controlnet_aux() -> None:
    """Two people standing side by side, as a trained network's maps show them: the same keypoints
    and the same picture, pixel for pixel, as OpenposeDetector makes; each limb in its colour."""
    field = PoseField([standing(0.3), standing(0.7)])
    side = 384
    picture = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    want = _aux_detector(field)(picture, detect_resolution=side, image_resolution=side, output_type="np")
    got = pose_mod.pose_map(field, picture, {"resolution": side}, CPU)
    assert np.array_equal(got, want)
    people = pose_mod.find_people(field, np.ascontiguousarray(picture[:, :, ::-1]), CPU)
    assert len(people) == 2
    for person in people:
        centre = 0.3 if person[1][0] < 0.5 else 0.7  # type: ignore[index]
        for found, (x, y) in zip(person, standing(centre), strict=True):
            assert found is not None and abs(found[0] - x) < 1 / 46 and abs(found[1] - y) < 1 / 46
    # the neck to right shoulder limb is red at 60 %, the right knee's dot full cyan-green
    neck, shoulder = (int(v * side) for v in standing(0.3)[1]), (int(v * side) for v in standing(0.3)[2])
    (nx, ny), (sx, sy) = neck, shoulder
    assert tuple(got[(ny + sy) // 2, (nx + sx) // 2]) == (153, 0, 0)
    kx, ky = (int(v * side) for v in standing(0.3)[9])
    assert tuple(got[ky, kx]) == (0, 255, 255)
    assert tuple(got[5, 5]) == (0, 0, 0)

    # at another size the map is drawn at the resolution's size and resized to the picture's
    wide = np.ascontiguousarray(picture[:250, :, :])
    at_192 = pose_mod.pose_map(field, wide, {"resolution": 192}, CPU)
    aux_192 = _aux_detector(field)(wide, detect_resolution=192, image_resolution=192, output_type="np")
    assert at_192.shape == (250, side, 3) and aux_192.shape == (192, 320, 3)
    import cv2

    assert np.array_equal(at_192, cv2.resize(aux_192, (side, 250), interpolation=cv2.INTER_LINEAR))


def test_the_map_through_the_manager(files: dict[str, Path]) -> None:
    """A picture's map made by a real-width network (trunk and stage 1) placed on a simulated
    small card equals the one made in RAM; the events name the preprocessor."""
    picture = np.random.default_rng(1).integers(0, 256, (256, 64, 3), dtype=np.uint8)
    settings = {"resolution": 64}
    assert find_preprocessor("openpose").model_input(256, 64, settings) == (184, 48)  # type: ignore[misc]
    by_family = {"openpose-body": files["stage1"]}
    ram = Placement(device_named("cpu"), PlacementConfig())
    plain = preprocess("openpose", picture, settings, model=model_run(ram, PreprocessorModels(), by_family))
    small = Placement(device_named("cpu"), PlacementConfig(simulate_bytes=40 << 20), cpu_is_device=True)
    placed = preprocess(
        "openpose", picture, settings, model=model_run(small, PreprocessorModels(), by_family)
    )
    assert plain.shape == (256, 64, 3) and plain.dtype == np.uint8
    assert np.array_equal(plain, placed)
    assert any(e.model == "body_stage1 preprocessor" for e in small.events.events())


def test_missing_pickled_onnx_and_damaged_files_are_explained(files: dict[str, Path], tmp_path: Path) -> None:
    record = find_preprocessor("pose")  # the alias
    with pytest.raises(
        LoadoutError,
        match=r"needs an OpenPose body model file.*body_pose_model\.pth of lllyasviel/Annotators",
    ):
        model_files([record], [], [])
    with pytest.raises(FileFormatError, match=r"only as safetensors"):
        load_preprocessor(files["pickle"])
    onnx = tmp_path / "dw-ll_ucoco_384.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x07pytorch")
    with pytest.raises(FileFormatError, match=r"dw-ll_ucoco_384\.onnx is not a whole ONNX model"):
        model_files([record], [onnx], [])  # DWPose's files are the dwpose preprocessor's (test_dwpose.py)
    state = load_file(files["stage1"])
    del state["conv5_3_CPM_L2.bias"]
    save_file(state, tmp_path / "cut.safetensors")
    with pytest.raises(ModelMismatchError, match=r"1 weights missing.*conv5_3_CPM_L2\.bias"):
        load_preprocessor(tmp_path / "cut.safetensors")
    # a hand file where the body's goes: tests/core/preprocess/test_openpose_hands.py


def test_the_command_line_and_the_png_parameters(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    picture = tmp_path / "tall.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (256, 64, 3), dtype=np.uint8)).save(picture)
    out = tmp_path / "pose.png"
    args = ["preprocess", "openpose", str(picture), "-o", str(out), "--set", "resolution=64"]
    assert main([*args, "--model", str(files["stage1"])]) == 0
    with Image.open(out) as im:
        assert im.size == (64, 256)
    bad = tmp_path / "bad.png"
    assert main(["preprocess", "openpose", str(picture), "-o", str(bad)]) != 0
    err = capsys.readouterr().err
    assert "body_pose_model.pth" in err and "Traceback" not in err and not bad.exists()
    key, text = controlnet_parameter(0, "control_v11p_sd15_openpose", 1.0, 0.0, 1.0, "openpose")
    (item,) = controlnets_in({key: text})
    assert item.module == "openpose" and preprocessor_named(item.module) == "openpose"
