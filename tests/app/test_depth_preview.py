"""A ControlNet row's depth preprocessor in the window: its map is made on the backend's worker with
the library's Depth Anything V2 file (the safetensors one, not the pickle beside it), comes back to
the row's thumbnail and preview, and equals the map core makes of the same shrunk picture."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pytestqt.qtbot import QtBot

from app.backend.hint_maps import shrunk
from app.gui.hint_preprocessor import PREVIEW_SIDE
from core.preprocess import preprocess
from core.preprocess.placed import PreprocessorModels, model_run
from core.session.placement import Placement
from tests.fixtures.depth_anything import depth_files
from tests.fixtures.drawn import landscape


def test_the_depth_row_shows_the_map_made_with_the_librarys_model(  # type: ignore[no-untyped-def]
    qtbot: QtBot, make_window, tmp_path: Path
) -> None:
    folder = tmp_path / "models" / "depth"
    folder.mkdir(parents=True)
    files = depth_files(folder)
    house = landscape(tmp_path / "house.png", 96, 64)
    window = make_window(tmp_path / "models")
    index = lambda: window.backend.session.library.index  # noqa: E731
    qtbot.waitUntil(
        lambda: (
            index() is not None and sum(e.kind == "preprocessor_model" for e in index().entries()) == 3
        ),  # both layouts and the .pth
        timeout=30000,
    )
    window.generate_panel.workflows.setChecked(True)
    row = window.generate_panel.workflows.controlnets.rows[0]
    row.hint.set_path(house)
    row.pre.set_name("depth")
    assert "Making the depth map" in row.pre.thumb.toolTip()
    qtbot.waitUntil(lambda: row.pre.map is not None, timeout=60000)
    assert not row.pre.thumb.pixmap().isNull() and row.pre.preview_button.isEnabled()
    want = preprocess(
        "depth", shrunk(house, PREVIEW_SIDE),
        model=model_run(Placement(None), PreprocessorModels(), {"depth-anything-v2": files["original"]}),
    )  # fmt: skip
    assert row.pre.map is not None and np.array_equal(row.pre.map, want)
    assert row.pre.map.shape == (64, 96, 3) and row.pre.map.max() == 255
    row.pre.set_name("canny")  # an edge map is made at once, in the window's thread
    assert row.pre.map is not None and "canny" in row.pre.thumb.toolTip()
