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
