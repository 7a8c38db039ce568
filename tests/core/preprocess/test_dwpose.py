"""DWPose from its two ONNX files (small graphs with the real signatures whose constants answer two
known people: tests/fixtures/dwpose.py), against rtmlib 0.0.16 (YOLOX and RTMPose over the same
files: boxes and keypoints) and controlnet_aux 0.0.10's DWposeDetector (its conversion to OpenPose's
parts and its drawing: the map pixel for pixel); recognised by signature, run through the manager,
missing, other and damaged ONNX files explained, the command line and PNG parameters."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cli import main
from core.errors import FileFormatError, LoadoutError
from core.files.onnx import read_onnx_signature
from core.generate.workflows import controlnet_parameter, controlnets_in
from core.library.index import LibraryIndex
from core.library.sources import ModelRoot
from core.memory.devices import device_named
from core.preprocess import dwpose as dw
from core.preprocess import find_preprocessor, preprocess, preprocessor_named
from core.preprocess.onnx_models import DETECTOR, POSE, load_onnx
from core.preprocess.placed import PreprocessorModels, let_go, library_models, model_files, model_run
from core.session.placement import Placement, PlacementConfig
from tests.fixtures.controlnet_aux import aux
from tests.fixtures.dwpose import PERSON_A, PERSON_B, dwpose_files, picture

ALL = {"body": 1, "hands": 1, "face": 1}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return dwpose_files(tmp_path_factory.mktemp("dwpose"))


@pytest.fixture(scope="module")
def models(files: dict[str, Path]) -> dict[str, Any]:
    return {DETECTOR: load_onnx(files["detector"], DETECTOR), POSE: load_onnx(files["pose"], POSE)}


def _rtmlib() -> Any:
    return pytest.importorskip(
        "rtmlib", reason="rtmlib (the reference) is not installed: pip install --no-deps rtmlib"
    )


def test_boxes_and_keypoints_equal_rtmlib(files: dict[str, Path], models: dict[str, Any]) -> None:
    rtmlib = _rtmlib()
    pic = picture()
    yolox = rtmlib.YOLOX(
        str(files["detector"]), (640, 640), det_mode="multiclass", nms_thr=0.45, score_thr=0.3
    )
    boxes, classes = yolox(pic)
    want_boxes = boxes[classes == 0]
    x, ratio = dw.letterbox(pic, 640)
    got_boxes = dw.decode_people(models[DETECTOR].run(x)[0], 640, ratio)
    # the copy NMS drops, the bicycle and the person at 0.25 are gone; the two people are where made
    assert got_boxes.shape == (2, 4) and np.allclose(got_boxes, want_boxes, atol=1e-4)
    assert np.allclose(got_boxes, [PERSON_A, PERSON_B], atol=2.0)

    rtmpose = rtmlib.RTMPose(str(files["pose"]), (288, 384), to_openpose=True)
    want_points, want_scores = rtmpose(pic, bboxes=want_boxes)
    found = dw.estimate(pic, models[DETECTOR].run, 640, models[POSE].run, (288, 384))
    points = np.stack([p for p, _s in found])
    scores = np.stack([s for _p, s in found])
    assert points.shape == (2, 134, 2) and np.allclose(points, want_points, atol=1e-3)
    # scores: the smaller of the x and y maxima (DWPose's and MMPose's rule); rtmlib 0.0.16 takes
    # their mean, which differs only at the right ear (x 0.5, y 0.2: OpenPose's part 16); the neck
    # is 1 when both shoulders score above 0.3 (rtmlib: the smaller shoulder score)
    same = np.ones(134, bool)
    same[[1, 16]] = False
    assert np.allclose(scores[:, same], want_scores[:, same], atol=1e-6)
    assert np.allclose(scores[:, 16], want_scores[:, 16] - 0.15, atol=1e-6)
    assert (scores[:, 1] == 1).all() and (want_scores[:, 1] > 0.3).all()
    assert scores[0, 16] < 0.3 < want_scores[0, 16]  # drawn by rtmlib's rule, not by DWPose's


def _aux_detector(models: dict[str, Any]) -> Any:
    """controlnet_aux 0.0.10's DWposeDetector whose pose estimation is Loadout's (its ``Wholebody``
    needs MMPose): the reference converts the 134 keypoints to OpenPose's parts and draws them."""
    module = aux("dwpose")

    def estimation(bgr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rgb = np.ascontiguousarray(bgr[:, :, ::-1])
        found = dw.estimate(rgb, models[DETECTOR].run, 640, models[POSE].run, (288, 384))
        return np.stack([p for p, _s in found]), np.stack([s for _p, s in found])

    detector = module.DWposeDetector.__new__(module.DWposeDetector)
    detector.pose_estimation = estimation
    return detector


def test_the_map_equals_controlnet_aux(models: dict[str, Any]) -> None:
    """The same picture, pixel for pixel, as DWposeDetector draws it (at 256 px, the picture's short
    side and multiples of 64, its resizes keep the size): bodies, hands and faces."""
    pic = picture()
    want = _aux_detector(models)(pic, detect_resolution=256, image_resolution=256, output_type="np")
    got = preprocess(
        "dw_openpose_full", pic, model=lambda record, p, s: record.onnx_hint(models, p, s, lambda: None)
    )
    assert got.shape == (256, 320, 3) and np.array_equal(got, want)
    colours = {tuple(c) for c in got.reshape(-1, 3)}
    assert (255, 255, 255) in colours and (0, 0, 255) in colours  # face dots, hand dots
    assert (255, 0, 0) in colours and (153, 0, 0) in colours  # the nose's dot, neck-shoulder limb
    people = dw.find_people(models, pic)
    assert [p.body[16] is None and p.body[17] is None for p in people] == [True, True]  # the ears
    assert sum(p is None for p in people[0].face) == 10 and people[0].left_hand[4] is None

    no_hands = dw.dwpose_map(models, pic, {"body": 1, "hands": 0, "face": 1})
    handless = [replace(p, left_hand=(None,) * 21, right_hand=(None,) * 21) for p in people]
    assert np.array_equal(no_hands, dw.draw(handless, 256, 320, ALL)) and not np.array_equal(no_hands, got)
    assert not dw.dwpose_map(models, pic, {"body": 0, "hands": 0, "face": 0}).any()


def test_run_through_the_manager_and_let_go(files: dict[str, Path]) -> None:
    pic = picture()
    by_family = {DETECTOR: files["detector"], POSE: files["pose"]}
    held = PreprocessorModels()
    small = Placement(device_named("cpu"), PlacementConfig(simulate_bytes=40 << 20), cpu_is_device=True)
    made = preprocess("dwpose", pic, model=model_run(small, held, by_family))
    assert made.shape == (256, 320, 3) and made.any()
    names = {e.model for e in small.events.events() if e.kind == "keep"}
    assert names == {"yolox_l preprocessor", "dw-ll_ucoco_384 preprocessor"}
    sessions = list(held.sessions.values())
    assert all(small.manager.find(s) is not None and not small.is_placed(s) for s in sessions)
    again = preprocess("dwpose", pic, model=model_run(small, held, by_family))
    assert np.array_equal(made, again) and list(held.sessions.values()) == sessions  # loaded once
    for gone in held.keep_only([]):
        let_go(small, gone)
    assert not held.sessions and all(small.manager.find(s) is None for s in sessions)


def test_files_found_by_signature_missing_other_and_damaged_explained(
    files: dict[str, Path], tmp_path: Path
) -> None:
    record = find_preprocessor("dwpose_full")
    # known by their graphs, whatever their names
    renamed = tmp_path / "library" / "pose"
    renamed.mkdir(parents=True)
    shutil.copy(files["detector"], renamed / "person.onnx")
    shutil.copy(files["pose"], renamed / "wholebody.onnx")
    shutil.copy(files["other"], renamed / "classifier.onnx")
    assert model_files([record], [renamed / "wholebody.onnx", renamed / "person.onnx"], []) == {
        POSE: renamed / "wholebody.onnx", DETECTOR: renamed / "person.onnx",
    }  # fmt: skip
    index = LibraryIndex([ModelRoot(tmp_path / "library", None, "test")])
    assert model_files([record], [], library_models(index, [record])) == {
        DETECTOR: renamed / "person.onnx", POSE: renamed / "wholebody.onnx",
    }  # fmt: skip
    with pytest.raises(LoadoutError, match=r"needs yolox_l\.onnx \(DWPose's person detector.*yzd-v/DWPose"):
        model_files([record], [files["pose"]], [])
    with pytest.raises(LoadoutError, match=r"needs dw-ll_ucoco_384\.onnx.*yzd-v/DWPose on Hugging Face"):
        model_files([record], [files["detector"]], [])
    other = r"resnet\.onnx is an ONNX model Loadout does not run \(pixels 1x3x224x224 -> logits 1x1000\)"
    with pytest.raises(FileFormatError, match=other + r".*give yolox_l\.onnx and dw-ll_ucoco_384\.onnx"):
        model_files([record], [files["other"]], [])
    with pytest.raises(
        FileFormatError, match=r"cut\.onnx is not a whole ONNX model.*Download the file again"
    ):
        model_files([record], [files["cut"]], [])
    # a file written with its weights also listed as graph inputs (older exporters) and a symbolic
    # batch: the same signature
    onnx = pytest.importorskip("onnx")
    model = onnx.load(files["pose"])
    model.graph.input.extend(
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in model.graph.initializer
    )
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, tmp_path / "old.onnx")
    signature = read_onnx_signature(tmp_path / "old.onnx")
    assert signature.describe() == "input batchx3x384x288 -> simcc_x 1x133x576, simcc_y 1x133x768"
    assert (
        model_files([record], [tmp_path / "old.onnx", files["detector"]], [])[POSE] == tmp_path / "old.onnx"
    )
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(FileFormatError, match=r"empty\.onnx is not a whole ONNX model"):
        model_files([record], [empty], [])


def test_the_command_line_and_the_png_parameters(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from PIL import Image

    source = tmp_path / "people.png"
    Image.fromarray(picture()).save(source)
    out = tmp_path / "pose.png"
    args = ["preprocess", "dwpose", str(source), "-o", str(out)]
    assert main([*args, "--model", str(files["detector"]), "--model", str(files["pose"])]) == 0
    with Image.open(out) as im:
        assert im.size == (320, 256) and np.asarray(im.convert("RGB")).any()
    bad = tmp_path / "bad.png"
    assert main(["preprocess", "dwpose", str(source), "-o", str(bad), "--model", str(files["pose"])]) != 0
    err = capsys.readouterr().err
    assert "yolox_l.onnx" in err and "Traceback" not in err and not bad.exists()
    key, text = controlnet_parameter(0, "control_v11p_sd15_openpose", 1.0, 0.0, 1.0, "dw_openpose_full")
    (item,) = controlnets_in({key: text})
    assert preprocessor_named(item.module) == "dwpose"


def test_a_generation_finds_both_files_in_the_library_and_lets_them_go(
    files: dict[str, Path], models: dict[str, Any], tmp_path: Path
) -> None:
    """The runner a generation's ControlNets use (``--controlnet FILE:PICTURE:dwpose``): both files
    from the library's folders, the sessions kept between generations and let go (forgotten by the
    manager) when no ControlNet uses them any more."""
    from core.generate.request import ImageSettings
    from core.generate.workflow_request import ControlNetUse
    from core.generate.workflows import WorkflowState, _preprocessor_run
    from core.session.session import Session

    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(files["detector"], folder / "yolox_l.onnx")
    shutil.copy(files["pose"], folder / "dw-ll_ucoco_384.onnx")
    session = Session(
        Placement(device_named("cpu"), PlacementConfig(simulate_bytes=40 << 20), cpu_is_device=True)
    )
    session.library.index = LibraryIndex([ModelRoot(folder, None, "test")])
    state = WorkflowState()
    use = ControlNetUse(
        tmp_path / "control.safetensors", tmp_path / "people.png", preprocessor="dw_openpose_full"
    )
    settings = ImageSettings("people", controlnets=(use,))
    run = _preprocessor_run(session, state, settings, lambda: None)
    pic = picture()
    assert run is not None and np.array_equal(
        preprocess("dwpose", pic, model=run), dw.dwpose_map(models, pic, ALL)
    )
    sessions = list(state.preprocessors.sessions.values())
    assert len(sessions) == 2 and all(session.placement.manager.find(s) is not None for s in sessions)
    assert _preprocessor_run(session, state, ImageSettings("people"), lambda: None) is None
    assert not state.preprocessors.sessions and all(
        session.placement.manager.find(s) is None for s in sessions
    )
