"""The Generate panel's LoRA schedules: off and collapsed by default; a typed schedule becomes the
request's record, a bad one is said under the line and refused in words; a dropped picture made
with schedules switches them on (and off for one made without); kept across a relaunch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters, format_parameters
from core.generate.png import save_png
from core.patching.schedule import parse_schedule
from tests.app.test_workflow_hires import _drop


def test_a_typed_schedule_becomes_the_requests(panel: GeneratePanel) -> None:
    box = panel.lora_schedules
    assert panel.settings().lora_schedules == () and not box.body.isVisible()
    box.setChecked(True)
    assert box.body.isVisible()
    box.line.setText("style=1@0, 0.5@0.4; detail=0@0, 1@0.5:2")
    assert panel.settings().lora_schedules == (
        parse_schedule("style=1@0,0.5@0.4"),
        parse_schedule("detail=0@0,1@0.5:2"),
    )
    assert not box.problem.isVisible()
    box.line.setText("style=1@3")
    assert box.problem.isVisible() and "outside the sampling" in box.problem.text()
    with pytest.raises(LoadoutError, match="outside the sampling"):
        panel.settings()
    box.setChecked(False)
    assert panel.settings().lora_schedules == ()


def test_a_dropped_picture_brings_its_schedules(panel: GeneratePanel, tmp_path: Path) -> None:
    made = GenerationParameters("castle", steps=20, seed=1, extra={"LoRA schedules": "style: 1@0 0@0.6"})
    _drop(panel, save_png(tmp_path / "s.png", np.zeros((4, 4, 3), np.uint8), format_parameters(made)))
    assert panel.settings().lora_schedules == (parse_schedule("style=1@0,0@0.6"),)
    plain = GenerationParameters("castle", steps=20, seed=1)
    _drop(panel, save_png(tmp_path / "p.png", np.zeros((4, 4, 3), np.uint8), format_parameters(plain)))
    assert panel.settings().lora_schedules == ()


def test_schedules_are_kept_across_a_relaunch(qtbot: QtBot, panel: GeneratePanel) -> None:
    panel.lora_schedules.setChecked(True)
    panel.lora_schedules.line.setText("style=1@0, 0.25@0.5")
    again = GeneratePanel()
    qtbot.addWidget(again)
    again.restore_fields(panel.fields())
    assert again.settings().lora_schedules == panel.settings().lora_schedules != ()
