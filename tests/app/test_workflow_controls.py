"""The Generate panel's workflow box: ControlNet, inpainting and refiner fields in the settings it
emits, and a dropped picture's ControlNet / refiner parameters read back into it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.generate.workflow_request import ControlNetUse, RefinerUse
from core.generate.workflows import controlnet_parameter


@pytest.fixture
def panel(qtbot: QtBot) -> GeneratePanel:
    p = GeneratePanel()
    qtbot.addWidget(p)
    p.show()
    return p


def test_the_box_adds_its_workflows_only_when_on(panel: GeneratePanel, tmp_path: Path) -> None:
    panel.prompt.setPlainText("a house")
    w = panel.workflows
    w.controlnet.set_path(tmp_path / "canny.safetensors")
    w.hint.set_path(tmp_path / "edges.png")
    w.strength.setValue(0.6)
    w.end.setValue(0.8)
    w.init.set_path(tmp_path / "photo.png")
    w.mask.set_path(tmp_path / "mask.png")
    w.denoise.setValue(0.5)
    w.refiner.set_path(tmp_path / "refiner.safetensors")
    assert panel.settings().controlnets == ()  # the box is off
    w.setChecked(True)
    s = panel.settings()
    assert s.controlnets == (
        ControlNetUse(tmp_path / "canny.safetensors", tmp_path / "edges.png", 0.6, 0.0, 0.8),
    )
    assert (s.init_image, s.mask_image, s.sampling.denoise) == (
        tmp_path / "photo.png",
        tmp_path / "mask.png",
        0.5,
    )
    assert s.refiner == RefinerUse(tmp_path / "refiner.safetensors", 0.8)


def test_a_pictures_controlnet_and_refiner_parameters_come_back(panel: GeneratePanel) -> None:
    key, value = controlnet_parameter(0, "canny", 0.45, 0.1, 0.7)
    text = format_parameters(
        GenerationParameters(
            "x", denoise=0.35, extra={key: value, "Refiner": "ref", "Refiner switch at": "0.7"}
        )
    )
    panel.apply_parameters(parse_parameters(text))
    w = panel.workflows
    assert w.isChecked()
    assert (w.strength.value(), w.start.value(), w.end.value()) == (0.45, 0.1, 0.7)
    assert (w.switch.value(), w.denoise.value()) == (0.7, 0.35)


def test_the_brush_paints_the_mask_that_generation_reads(qtbot: QtBot, tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtTest import QTest

    from app.gui.mask_editor import MaskEditor
    from core.generate.pictures import read_mask

    picture = tmp_path / "photo.png"
    Image.fromarray(np.full((64, 96, 3), 90, np.uint8)).save(picture)
    editor = MaskEditor(picture)
    qtbot.addWidget(editor)
    editor.show()
    editor.size_slider.setValue(8)
    canvas = editor.canvas
    QTest.mousePress(canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(10, 30))
    for x in range(12, 80, 4):
        QTest.mouseMove(canvas, QPoint(x, 30))
    QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(80, 30))
    mask = read_mask(editor.save(tmp_path / "mask.png"))
    assert mask.shape == (64, 96)
    assert mask[30, 20] == 1.0 and mask[30, 70] == 1.0  # along the stroke: repaint
    assert mask[5, 5] == 0.0 and mask[60, 90] == 0.0  # elsewhere: keep
