"""The Generate panel's regions: a collapsed list, off by default; rows added and removed become the
request's records; a bad row is refused in words; a dropped picture made with regions fills the
rows (a mask it names is kept) and one made without empties them; the rows are kept across a
relaunch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters, format_parameters
from core.generate.pictures import read_mask
from core.generate.png import save_png
from core.regions import Box, Region
from tests.app.test_workflow_hires import _drop


def test_rows_added_and_removed_become_the_requests_regions(panel: GeneratePanel) -> None:
    box = panel.regions
    assert panel.settings().regions == () and not box.list.isVisible()
    box.setChecked(True)
    assert box.list.isVisible() and panel.settings().regions == ()
    box.add.click()
    box.add.click()
    first, second = box.rows
    for spin, v in zip(first.box, (0, 0, 192, 256), strict=True):
        spin.setValue(v)
    first.prompt.setText("a red boat")
    first.strength.setValue(1.5)
    first.end.setValue(0.6)
    second.unit.setCurrentText("fraction")
    for spin, v in zip(second.box, (0.5, 0.25, 0.5, 0.75), strict=True):
        spin.setValue(v)
    second.prompt.setText("a stormy sea")
    assert panel.settings().regions == (
        Region("a red boat", Box(0, 0, 192, 256), strength=1.5, end=0.6),
        Region("a stormy sea", Box(0.5, 0.25, 0.5, 0.75, fractions=True)),
    )
    first.remove.click()
    assert [r.prompt for r in panel.settings().regions] == ["a stormy sea"]
    box.setChecked(False)
    assert panel.settings().regions == ()


def test_a_bad_row_is_refused_in_words(panel: GeneratePanel) -> None:
    panel.regions.setChecked(True)
    row = panel.regions.add_row()
    with pytest.raises(LoadoutError, match="empty prompt"):
        panel.settings()
    row.prompt.setText("a boat")
    row.box[0].setValue(400)  # 400 + 256 > the panel's 512 pixels
    with pytest.raises(LoadoutError, match="reaches outside"):
        panel.settings()


def test_a_dropped_picture_fills_the_rows_and_a_plain_one_empties_them(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    regions = (
        Region("a red boat", Box(0, 0, 256, 512), strength=1.5, start=0.1, end=0.6),
        Region("a stormy sea", mask=tmp_path / "sea.png", strength=0.9, mask_bounds=True),
    )
    made = GenerationParameters("castle", steps=20, seed=1, regions=regions)
    _drop(panel, save_png(tmp_path / "r.png", np.zeros((4, 4, 3), np.uint8), format_parameters(made)))
    assert panel.regions.isChecked() and panel.settings().regions == regions
    assert panel.regions.rows[1].mask_label.text() == "mask: sea.png"
    plain = GenerationParameters("castle", steps=20, seed=1)
    _drop(panel, save_png(tmp_path / "p.png", np.zeros((4, 4, 3), np.uint8), format_parameters(plain)))
    assert panel.settings().regions == () and not panel.regions.rows


def test_the_rows_are_kept_across_a_relaunch(qtbot: QtBot, panel: GeneratePanel) -> None:
    panel.regions.setChecked(True)
    row = panel.regions.add_row()
    row.prompt.setText("a lighthouse")
    row.start.setValue(0.2)
    saved = panel.fields()
    again = GeneratePanel()
    qtbot.addWidget(again)
    again.restore_fields(saved)
    assert (
        again.settings().regions
        == panel.settings().regions
        == (Region("a lighthouse", Box(0, 0, 256, 256), start=0.2),)
    )


def test_a_box_drawn_on_the_picture_becomes_the_rows_box(qtbot: QtBot, panel: GeneratePanel) -> None:
    panel.width_.setValue(768)
    panel.height_.setValue(512)
    panel.regions.setChecked(True)
    first = panel.regions.add_row()
    second = panel.regions.add_row()
    second.unit.setCurrentText("fraction")
    for spin, v in zip(second.box, (0.5, 0.5, 0.5, 0.5), strict=True):
        spin.setValue(v)
    dialog = panel.regions.box_dialog(first)
    canvas = dialog.canvas
    assert canvas.boxes == [(0, 0, 256, 256), (384, 256, 384, 256)] and canvas.scale == 512 / 768
    qtbot.addWidget(dialog)
    at = lambda x, y: QPoint(round(x * canvas.scale), round(y * canvas.scale))  # noqa: E731
    qtbot.mousePress(canvas, Qt.MouseButton.LeftButton, pos=at(600, 40))
    qtbot.mouseMove(canvas, at(300, 300))
    qtbot.mouseRelease(canvas, Qt.MouseButton.LeftButton, pos=at(100, 600))  # down-left, past the edge
    assert canvas.box() == (104, 40, 496, 472)  # snapped to 8-pixel cells, inside the picture
    first.set_pixel_box(canvas.box())  # what OK does
    first.prompt.setText("a red boat")
    second.prompt.setText("sea")
    assert panel.settings().regions[0] == Region("a red boat", Box(104, 40, 496, 472))


def test_a_painted_mask_becomes_the_rows_region(qtbot: QtBot, panel: GeneratePanel, tmp_path: Path) -> None:
    panel.width_.setValue(256)
    panel.height_.setValue(192)
    panel.regions.setChecked(True)
    row = panel.regions.add_row()
    row.prompt.setText("a lake")
    editor = panel.regions.mask_editor()  # what "Mask…" opens
    qtbot.addWidget(editor)
    assert (editor.canvas.width(), editor.canvas.height()) == (256, 192)
    left = Qt.MouseButton.LeftButton
    for kind, at in ((QEvent.Type.MouseButtonPress, 90), (QEvent.Type.MouseMove, 110)):  # a short stroke
        point = QPointF(at, 100)
        QApplication.sendEvent(
            editor.canvas, QMouseEvent(kind, point, point, left, left, Qt.KeyboardModifier.NoModifier)
        )
    saved = editor.save(tmp_path / "lake.png")  # what Save does, into the masks folder
    row.set_mask(saved)
    row.unit.setCurrentText("mask only")
    assert panel.settings().regions == (Region("a lake", mask=saved),)
    assert row.mask_label.text() == "mask: lake.png"
    painted = read_mask(saved)
    assert painted.shape == (192, 256) and painted[100, 100] == 1.0 and painted[0, 0] == 0.0


def test_a_negative_region_is_ticked_kept_and_read_back(
    qtbot: QtBot, panel: GeneratePanel, tmp_path: Path
) -> None:
    panel.regions.setChecked(True)
    row = panel.regions.add_row()
    row.prompt.setText("blurry")
    assert not row.negative.isChecked()
    row.negative.setChecked(True)
    wanted = (Region("blurry", Box(0, 0, 256, 256), negative=True),)
    assert panel.settings().regions == wanted
    again = GeneratePanel()
    qtbot.addWidget(again)
    again.restore_fields(panel.fields())
    assert again.settings().regions == wanted and again.regions.rows[0].negative.isChecked()
    made = GenerationParameters("castle", steps=20, seed=1, regions=wanted)
    _drop(again, save_png(tmp_path / "n.png", np.zeros((4, 4, 3), np.uint8), format_parameters(made)))
    assert again.settings().regions == wanted
