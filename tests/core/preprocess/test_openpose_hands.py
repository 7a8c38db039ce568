"""OpenPose hands and faces (openpose_full, openpose_hand, openpose_face, openpose_faceonly) against
controlnet_aux's ``OpenposeDetector`` with ``include_hand`` / ``include_face``: its ``handpose_model``
and ``FaceNet`` at the real widths and six stages with random weights, saved as
``hand_pose_model.pth`` / ``facenet.pth`` hold them (safetensors, the hand also under the network's
own names, pickles converted by Loadout's convert); detected, loaded zero-copy, equal to the
reference networks; the hands' and faces' keypoints and the drawn maps equal to the detector's for
networks whose maps show a person; the three networks placed together by the manager; missing
files refused in words naming them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from app.cli import main
from core.detect.detector import detect
from core.errors import FileFormatError, LoadoutError, ModelMismatchError
from core.files import read_tensor_index
from core.generate.workflows import controlnet_parameter, controlnets_in
from core.loading.convert_file import convert_file
from core.loading.preprocessor import load_preprocessor
from core.memory.devices import device_named
from core.preprocess import find_preprocessor, pose_hands, pose_whole, preprocess, preprocessor_named
from core.preprocess.placed import PreprocessorModels, model_files, model_run
from core.session.placement import Placement, PlacementConfig
from tests.fixtures.controlnet_aux import aux, aux_hand
from tests.fixtures.openpose import STANDING, PoseField, aux_open_pose, standing
from tests.fixtures.openpose_hands import (
    FACE,
    HAND,
    FaceField,
    KeypointField,
    cpm_files,
    reference_face,
    reference_hand,
    zero_files,
)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def references() -> dict[str, torch.nn.Module]:
    return {"hand": reference_hand(), "face": reference_face()}


@pytest.fixture(scope="module")
def files(
    references: dict[str, torch.nn.Module], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("openpose_hands")
    out = cpm_files(folder, references["hand"], references["face"])
    # a body network (trunk and stage 1, real widths) whose maps are all zero: it finds nobody, so
    # the hand and face networks (whose real-width runs at 184..736 px are too slow for a test) are
    # loaded and placed but not run where the body's file is used
    out |= zero_files(folder, ("body",))
    return out


@pytest.mark.parametrize(
    ("name", "family", "layout", "stages"),
    [
        ("hand", "openpose-hand", "original", 6),
        ("face", "openpose-face", "original", 6),
        ("hand_stage1", "openpose-hand", "original", 1),
        ("face_stage1", "openpose-face", "original", 1),
        ("hand_module", "openpose-hand", "module", 1),
    ],
)
def test_detected_by_its_keys(
    files: dict[str, Path], name: str, family: str, layout: str, stages: int
) -> None:
    det = detect(read_tensor_index(files[name]).tensors, {}, files[name].name)
    assert (det.kind, det.family, det.layout) == ("preprocessor_model", family, layout)
    assert det.fields == {"stages": stages, "parts": 22 if family == "openpose-hand" else 71}


def test_the_networks_equal_controlnet_aux(
    references: dict[str, torch.nn.Module], files: dict[str, Path]
) -> None:
    x = torch.rand(1, 3, 24, 16) - 0.5  # the smallest input with a 3 x 2 map at 1/8
    for name, parts in (("hand", 22), ("face", 71)):
        loaded = load_preprocessor(files[name])
        assert loaded.family == f"openpose-{name}" and loaded.config.stages == 6  # type: ignore[attr-defined]
        with torch.no_grad():
            want = references[name](x)
            want = want[-1] if isinstance(want, list) else want
            got = loaded.module(x)
        assert got.shape == (1, parts, 3, 2) and want.abs().max() > 0.1
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
        # filled zero-copy from the mapped file
        conv = loaded.module.model1_0.conv1_1.weight  # type: ignore[union-attr]
        ref = references[name].state_dict()["model1_0.conv1_1.weight" if name == "hand" else "conv1_1.weight"]
        assert torch.equal(conv, ref) and conv.data_ptr() != ref.data_ptr()
    # the network's own names fill the same network
    module, short = (
        load_preprocessor(files["hand_module"]).module,
        load_preprocessor(files["hand_stage1"]).module,
    )
    with torch.no_grad():
        assert torch.equal(module(x), short(x))


def test_pickles_are_converted_and_refused_unconverted(files: dict[str, Path], tmp_path: Path) -> None:
    for name in ("hand", "face"):
        with pytest.raises(FileFormatError, match=r"only as safetensors"):
            load_preprocessor(files[f"{name}_pth"])
        out = convert_file(files[f"{name}_pth"], tmp_path / f"{name}.safetensors")
        assert load_preprocessor(out).family == f"openpose-{name}"
        want = load_file(files[f"{name}_stage1"])
        got = load_file(out)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


#: a person standing (its hands and face in boxes of 78 and 69 px at 384), and a small one whose
#: boxes are under 20 px (no hands or face looked for)
PEOPLE = [standing(0.35), [(0.8 + dx * 0.25, 0.5 + y * 0.25) for dx, y in STANDING]]


def _aux_detector(hand: Any, face: Any) -> Any:
    """controlnet_aux's OpenposeDetector whose networks are the given ones."""
    open_pose = aux_open_pose()
    parts = []
    for cls, network in (
        (aux("open_pose.body").Body, PoseField(PEOPLE)),
        (aux_hand().Hand, hand),
        (aux("open_pose.face").Face, face),
    ):
        part = cls.__new__(cls)
        part.model = network
        parts.append(part)
    return open_pose.OpenposeDetector(*parts)


def test_hands_faces_and_maps_equal_controlnet_aux() -> None:
    """The same keypoints (a hand's missing one included) and the same maps, pixel for pixel, as
    OpenposeDetector's, for each of the four preprocessors (the hands are looked for once on each
    side: the detector's finds drawn by its ``draw_poses``, Loadout's by ``draw_whole``)."""
    hand = list(HAND)
    hand[7] = None  # the index finger's tip not seen
    detector = _aux_detector(KeypointField(hand), FaceField(FACE))
    models = torch.nn.ModuleDict(
        {
            "openpose-body": PoseField(PEOPLE),
            "openpose-hand": KeypointField(hand),
            "openpose-face": KeypointField(FACE),
        }
    )
    side = 384
    picture = np.random.default_rng(0).integers(0, 256, (side, side, 3), dtype=np.uint8)
    poses = detector.detect_poses(picture, include_hand=True, include_face=True)
    bgr = np.ascontiguousarray(picture[:, :, ::-1])
    found = pose_whole.find_whole(models, bgr, CPU, lambda: None, hands=True, face=True)
    assert len(found) == len(poses) == 2
    for mine, theirs in zip(found, poses, strict=True):
        for a, b in (
            (mine.left, theirs.left_hand),
            (mine.right, theirs.right_hand),
            (mine.face, theirs.face),
        ):
            assert (a is None) == (b is None)
            if a is not None:
                assert np.array_equal(a, np.array([[k.x, k.y] for k in b], np.float32))
    big = next(p for p in found if p.left is not None)
    assert big.right is not None and big.face is not None and len(big.face) == 71
    assert all(p.left is None and p.face is None for p in found if p is not big)  # boxes under 20 px
    # the left hand's box: from the left wrist, a third of the forearm further, 1.5 upper arms wide
    (x, y, w, is_left), _right = pose_hands.hand_boxes(big.body, side, side)
    assert is_left and 75 <= w <= 82
    for k, point in enumerate(hand):
        kx, ky = big.left[k]  # type: ignore[index]
        if point is None:
            assert kx < 0 and ky < 0  # -1 over the picture's size, as the reference marks it
        else:
            assert abs(kx * side - (x + point[0] * w)) < 2.5 and abs(ky * side - (y + point[1] * w)) < 2.5

    # each preprocessor draws its part of the same finds as the detector's draw_poses does
    draw_poses = aux_open_pose().draw_poses
    for name, body, hands, face in (
        ("openpose_full", True, True, True),
        ("openpose_hand", True, True, False),
        ("openpose_face", True, False, True),
        ("openpose_faceonly", False, False, True),
    ):
        record = find_preprocessor(name)
        assert [m.family for m in record.more_models] == ["openpose-hand"] * hands + ["openpose-face"] * face
        only = [
            pose_whole.WholePerson(
                p.body, *((p.left, p.right) if hands else (None, None)), p.face if face else None
            )
            for p in found
        ]
        mine = pose_whole.draw_whole(only, side, side, body=body)
        theirs = draw_poses(poses, side, side, draw_body=body, draw_hand=hands, draw_face=face)
        assert np.array_equal(mine, theirs), name
    # faces only: white dots on black
    assert {tuple(c) for c in np.unique(mine.reshape(-1, 3), axis=0)} == {(0, 0, 0), (255, 255, 255)}

    # the whole run (openpose_face: the body's and face's networks) equals the detector's
    def run(record: Any, pic: np.ndarray, settings: Any) -> np.ndarray:
        out: np.ndarray = record.model_hint(models, pic, settings, CPU, lambda: None)
        return out

    wide = np.ascontiguousarray(picture[:250])
    got = preprocess("openpose_face", wide, {"resolution": 192}, model=run)
    want = detector(wide, 192, 192, include_face=True, output_type="np")
    assert got.shape == (250, side, 3) and want.shape == (192, 320, 3)
    assert np.array_equal(got, cv2_resize(want, side, 250)) and (want == 255).all(-1).any()


def cv2_resize(picture: np.ndarray, width: int, height: int) -> np.ndarray:
    import cv2

    out: np.ndarray = cv2.resize(picture, (width, height), interpolation=cv2.INTER_LINEAR)
    return out


def test_the_three_networks_through_the_manager(files: dict[str, Path]) -> None:
    """openpose_full with real-width networks (trunk and stage 1) placed together on a simulated
    small card, with room for the hand network's largest run (736 x 736), equals the run in RAM
    (a black map: the body network here finds nobody); the events name each network."""
    picture = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    settings = {"resolution": 64}
    library = [
        (files[n], "preprocessor_model", f"openpose-{n.split('_')[0]}")
        for n in ("hand_stage1", "face_stage1")
    ]
    by_family = model_files([find_preprocessor("openpose_full")], [files["body"]], library)
    assert by_family == {
        "openpose-body": files["body"],
        "openpose-hand": files["hand_stage1"],
        "openpose-face": files["face_stage1"],
    }
    ram = Placement(device_named("cpu"), PlacementConfig())
    plain = preprocess(
        "openpose_full", picture, settings, model=model_run(ram, PreprocessorModels(), by_family)
    )
    small = Placement(device_named("cpu"), PlacementConfig(simulate_bytes=600 << 20), cpu_is_device=True)
    placed = preprocess(
        "openpose_full", picture, settings, model=model_run(small, PreprocessorModels(), by_family)
    )
    assert plain.shape == (64, 64, 3) and np.array_equal(plain, placed)
    named = {e.model for e in small.events.events()}
    assert {"body_pose_model preprocessor", "hand_stage1 preprocessor", "face_stage1 preprocessor"} <= named


def test_missing_and_wrong_files_are_explained(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = find_preprocessor("openpose_full")
    with pytest.raises(
        LoadoutError,
        match=r"needs an OpenPose hand model file.*hand_pose_model\.pth of lllyasviel/Annotators",
    ):
        model_files([full], [files["body"]], [])
    with pytest.raises(
        LoadoutError, match=r"needs an OpenPose face model file.*facenet\.pth of lllyasviel/Annotators"
    ):
        model_files([full], [files["body"], files["hand_stage1"]], [])
    picture = np.zeros((64, 64, 3), np.uint8)
    wrong = {
        "openpose-body": files["body"],
        "openpose-face": files["face_stage1"],
        "openpose-hand": files["face_stage1"],
    }
    ram = Placement(device_named("cpu"), PlacementConfig())
    with pytest.raises(
        ModelMismatchError,
        match=r"face_stage1\.safetensors is a openpose-face model, and the openpose_full preprocessor "
        r"takes an OpenPose hand model",
    ):
        preprocess("openpose_full", picture, model=model_run(ram, PreprocessorModels(), wrong))
    # the body-only preprocessor refuses a hand file where the body's goes
    with pytest.raises(
        ModelMismatchError, match=r"openpose-hand model, and the openpose preprocessor takes an OpenPose body"
    ):
        preprocess(
            "openpose",
            picture,
            model=model_run(ram, PreprocessorModels(), {"openpose-body": files["hand_stage1"]}),
        )

    # the command line: refused in words without the face file, written with all three
    from PIL import Image

    source = tmp_path / "picture.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (96, 64, 3), dtype=np.uint8)).save(source)
    out = tmp_path / "full.png"
    args = ["preprocess", "openpose_full", str(source), "-o", str(out), "--set", "resolution=64"]
    assert main([*args, "--model", str(files["body"]), "--model", str(files["hand_stage1"])]) != 0
    err = capsys.readouterr().err
    assert "facenet.pth" in err and "Traceback" not in err and not out.exists()
    assert (
        main(
            [
                *args,
                "--model",
                str(files["body"]),
                "--model",
                str(files["hand_stage1"]),
                "--model",
                str(files["face_stage1"]),
            ]
        )
        == 0
    )
    with Image.open(out) as im:
        assert im.size == (64, 96)
    # A1111 PNG parameters name them as sd-webui-controlnet does
    for name in ("openpose_full", "openpose_hand", "openpose_face", "openpose_faceonly"):
        key, text = controlnet_parameter(0, "control_v11p_sd15_openpose", 1.0, 0.0, 1.0, name)
        (item,) = controlnets_in({key: text})
        assert item.module == name and preprocessor_named(item.module) == name
