"""A ControlNet row's openpose preprocessor in the window: with no OpenPose file in the library the
row says which file to get; with one, its map is made on the backend's worker and shown;
openpose_full with only the body file names the hand file to get."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from pytestqt.qtbot import QtBot

from tests.fixtures.openpose import stage1_file


def _row(window):  # type: ignore[no-untyped-def]
    window.generate_panel.workflows.setChecked(True)
    return window.generate_panel.workflows.controlnets.rows[0]


def test_the_pose_row_explains_a_missing_model_then_shows_the_map(  # type: ignore[no-untyped-def]
    qtbot: QtBot, make_window, tmp_path: Path
) -> None:
    tall = tmp_path / "tall.png"  # narrow: the network runs at 184 x 48 px
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (256, 64, 3), dtype=np.uint8)).save(tall)
    empty = tmp_path / "empty"
    empty.mkdir()
    window = make_window(empty)
    qtbot.waitUntil(lambda: window.backend.session.library.index is not None, timeout=60000)
    row = _row(window)
    row.hint.set_path(tall)
    row.pre.set_name("openpose")
    qtbot.waitUntil(lambda: row.pre.thumb.toolTip().startswith("No map"), timeout=60000)
    tip = row.pre.thumb.toolTip()
    assert "needs an OpenPose body model file" in tip and "body_pose_model.pth" in tip
    assert row.pre.map is None and not row.pre.preview_button.isEnabled()

    folder = tmp_path / "models"
    folder.mkdir()
    stage1_file(folder / "body_pose_model.safetensors")
    window = make_window(folder)
    index = lambda: window.backend.session.library.index  # noqa: E731
    qtbot.waitUntil(
        lambda: index() is not None and any(e.family == "openpose-body" for e in index().entries()),
        timeout=60000,
    )
    row = _row(window)
    row.hint.set_path(tall)
    row.pre.set_name("openpose")
    qtbot.waitUntil(lambda: row.pre.map is not None, timeout=60000)
    assert row.pre.map.shape == (256, 64, 3) and row.pre.preview_button.isEnabled()
    assert row.pre.thumb.toolTip() == "The openpose map of tall.png"

    # openpose_full also needs the hand and face files: the row names the hand's
    row.pre.set_name("openpose_full")
    qtbot.waitUntil(lambda: row.pre.thumb.toolTip().startswith("No map"), timeout=60000)
    tip = row.pre.thumb.toolTip()
    assert "needs an OpenPose hand model file" in tip and "hand_pose_model.pth" in tip


def test_the_dwpose_row_finds_the_onnx_files_in_the_library(  # type: ignore[no-untyped-def]
    qtbot: QtBot, make_window, tmp_path: Path
) -> None:
    """DWPose's two ONNX files under another name in a library folder (the index lists no ONNX
    files; they are found by their graphs): the row's map is the one the files make."""
    from core.preprocess import dwpose
    from core.preprocess.onnx_models import DETECTOR, POSE, load_onnx
    from tests.fixtures.dwpose import dwpose_files, picture

    folder = tmp_path / "models"
    made = dwpose_files(tmp_path / "dw")
    (folder / "pose").mkdir(parents=True)
    made["detector"].rename(folder / "pose" / "detector.onnx")
    made["pose"].rename(folder / "pose" / "wholebody.onnx")
    people = tmp_path / "people.png"
    Image.fromarray(picture()).save(people)
    window = make_window(folder)
    qtbot.waitUntil(lambda: window.backend.session.library.index is not None, timeout=60000)
    row = _row(window)
    row.hint.set_path(people)
    row.pre.set_name("dwpose")
    qtbot.waitUntil(lambda: row.pre.map is not None, timeout=60000)
    models = {
        DETECTOR: load_onnx(folder / "pose" / "detector.onnx", DETECTOR),
        POSE: load_onnx(folder / "pose" / "wholebody.onnx", POSE),
    }
    want = dwpose.dwpose_map(models, picture(), {"body": 1, "hands": 1, "face": 1})
    assert np.array_equal(row.pre.map, want) and row.pre.thumb.toolTip() == "The dwpose map of people.png"
