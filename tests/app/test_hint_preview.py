"""The ControlNet row's preprocessor with the map's thumbnail and preview, and the outpainting
sides, in the Generate panel: what they put in the settings, what a picture's parameters bring
back, and a screenshot of the rows at 1366x768 (``shots/app/controlnet-rows-1366x768.png``; the
whole box: ``controlnet-rows-box.png``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtWidgets import QScrollArea
from pytestqt.qtbot import QtBot

from app.demo import DemoLibrary
from app.gui.generate_panel import GeneratePanel
from app.gui.hint_preprocessor import preview_map
from core.generate.outpaint_settings import Outpaint, outpaint_parameters
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.generate.workflow_request import ControlNetUse
from core.generate.workflows import controlnet_parameter
from core.preprocess import preprocess
from tests.app.conftest import SHOTS
from tests.fixtures.drawn import landscape


def test_a_preprocessor_shows_its_map_and_goes_into_the_settings(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    house = landscape(tmp_path / "house.png", 192, 128)
    w = panel.workflows
    w.setChecked(True)
    row = w.controlnets.rows[0]
    row.controlnet.set_path(tmp_path / "canny.safetensors")
    row.hint.set_path(house)
    assert row.pre.thumb.pixmap().isNull() and not row.pre.preview_button.isEnabled()  # none chosen
    row.pre.set_name("canny")
    assert not row.pre.thumb.pixmap().isNull() and row.pre.preview_button.isEnabled()
    assert row.pre.map is not None
    with __import__("PIL.Image").Image.open(house) as im:
        full = np.asarray(im.convert("RGB"))
    assert np.array_equal(row.pre.map, preprocess("canny", full))  # small enough: made at full size
    dialog = row.pre.preview_dialog()
    assert dialog is not None
    panel.prompt.setPlainText("a house")
    assert panel.settings().controlnets == (
        ControlNetUse(tmp_path / "canny.safetensors", house, 1.0, 0.0, 1.0, "canny"),
    )
    row.hint.set_path(None)
    assert row.pre.map is None and row.pre.thumb.pixmap().isNull()


def test_a_large_picture_is_previewed_small(tmp_path: Path) -> None:
    big = landscape(tmp_path / "big.png", 1200, 800)
    assert preview_map(big, "lineart").shape == (341, 512, 3)


def test_outpainting_sides_go_into_the_settings_and_come_back(panel: GeneratePanel, tmp_path: Path) -> None:
    w = panel.workflows
    w.setChecked(True)
    w.init.set_path(tmp_path / "photo.png")
    w.mask.set_path(tmp_path / "mask.png")
    panel.prompt.setPlainText("a house")
    assert panel.settings().outpaint is None and panel.settings().mask_image == tmp_path / "mask.png"
    w.outpaint.sides["right"].setValue(128)
    w.outpaint.feathering.setValue(24)
    s = panel.settings()
    assert s.outpaint == Outpaint(0, 0, 128, 0, 24) and s.mask_image is None  # its own mask

    key, value = controlnet_parameter(0, "canny", 0.5, 0.0, 1.0, "lineart")
    extra = {key: value, **outpaint_parameters(Outpaint(64, 0, 0, 32, 16))}
    other = GeneratePanel()
    other.apply_parameters(parse_parameters(format_parameters(GenerationParameters("x", extra=extra))))
    assert other.workflows.isChecked()
    assert other.workflows.outpaint.value() == Outpaint(64, 0, 0, 32, 16)
    assert other.workflows.controlnets.rows[0].pre.name == "lineart"
    other.deleteLater()


def test_screenshot_of_the_controlnet_rows_at_1366x768(
    qtbot: QtBot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    window = make_window(demo_library.folder)
    window.resize(1366, 768)
    window.show()
    panel = window.generate_panel
    w = panel.workflows
    w.setChecked(True)
    photo = landscape(tmp_path / "house.png", 384, 256)
    for name in ("canny", "lineart"):
        row = w.controlnets.rows[-1] if name == "canny" else w.controlnets.add_row()
        row.controlnet.set_path(tmp_path / f"control_{name}.safetensors")
        row.hint.set_path(photo)
        row.pre.set_name(name)
    w.init.set_path(photo)
    w.outpaint.sides["right"].setValue(128)
    qtbot.wait(50)
    scroller = w.parentWidget()
    while scroller is not None and not isinstance(scroller, QScrollArea):
        scroller = scroller.parentWidget()
    assert scroller is not None  # the panel scrolls on a short screen
    scroller.ensureWidgetVisible(w.controlnets.rows[-1], 0, 0)
    qtbot.wait(50)
    assert not w.controlnets.rows[0].pre.visibleRegion().isEmpty()  # the rows are on screen
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / "controlnet-rows-1366x768.png"
    assert window.grab().save(str(shot))
    assert (window.width(), window.height()) == (1366, 768)
    assert shot.stat().st_size > 5000
    box = SHOTS / "controlnet-rows-box.png"  # the whole box (both rows, the outpaint sides), unscrolled
    assert w.grab().save(str(box)) and box.stat().st_size > 5000
    assert all(not r.pre.thumb.pixmap().isNull() for r in w.controlnets.rows)
