"""The Generate panel's guidance patches: a collapsed list, off by default; a patch switched on
shows its parameters with ComfyUI's defaults and becomes the request's record; a dropped picture
made with patches switches them on with its values (and off again for one made without)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters, format_parameters
from core.generate.png import save_png
from core.guidance import PATCHES, parse_patch
from core.guidance.perturbed import Pag, Slg
from core.guidance.unet_level import FreeUV2
from tests.app.test_workflow_hires import _drop


def test_the_list_is_collapsed_and_off_until_a_patch_is_switched_on(panel: GeneratePanel) -> None:
    box = panel.guidance_patches
    assert panel.settings().guidance_patches == () and not box.list.isVisible()
    assert set(box.rows) == set(PATCHES)
    box.setChecked(True)
    assert box.list.isVisible() and panel.settings().guidance_patches == ()
    pag = box.rows["pag"]
    assert not pag.fields.isVisible()
    pag.on.setChecked(True)
    assert pag.fields.isVisible()
    assert panel.settings().guidance_patches == (Pag(scale=3.0),)  # ComfyUI's default
    pag.editors["scale"].setValue(4.5)  # type: ignore[attr-defined]
    box.rows["slg"].on.setChecked(True)
    box.rows["slg"].editors["double_layers"].setText("3, 4")  # type: ignore[attr-defined]
    assert panel.settings().guidance_patches == (Pag(scale=4.5), Slg(double_layers=(3, 4)))
    box.setChecked(False)
    assert panel.settings().guidance_patches == ()


def test_a_bad_value_is_refused_in_words(panel: GeneratePanel) -> None:
    box = panel.guidance_patches
    box.setChecked(True)
    box.rows["deep_shrink"].on.setChecked(True)
    box.rows["deep_shrink"].editors["start_percent"].setValue(0.2)  # type: ignore[attr-defined]
    assert panel.settings().guidance_patches[0].name == "deep_shrink"
    box.rows["slg"].on.setChecked(True)
    box.rows["slg"].editors["double_layers"].setText("700")  # type: ignore[attr-defined]
    with pytest.raises(LoadoutError, match="block numbers"):
        panel.settings()


def test_a_dropped_picture_switches_its_patches_on_in_its_order(panel: GeneratePanel, tmp_path: Path) -> None:
    patches = (parse_patch("freeu_v2:b1=1.2"), parse_patch("pag:2"))
    made = GenerationParameters("castle", steps=20, seed=1, patches=patches)
    _drop(panel, save_png(tmp_path / "g.png", np.zeros((4, 4, 3), np.uint8), format_parameters(made)))
    assert panel.settings().guidance_patches == (FreeUV2(b1=1.2), Pag(scale=2.0))
    plain = GenerationParameters("castle", steps=20, seed=1)
    _drop(panel, save_png(tmp_path / "p.png", np.zeros((4, 4, 3), np.uint8), format_parameters(plain)))
    assert panel.settings().guidance_patches == ()


def test_the_patches_switched_on_are_kept_across_a_relaunch(qtbot: QtBot, panel: GeneratePanel) -> None:
    box = panel.guidance_patches
    box.setChecked(True)
    box.rows["apg"].on.setChecked(True)
    box.rows["apg"].editors["momentum"].setValue(0.25)  # type: ignore[attr-defined]
    box.rows["pag"].on.setChecked(True)
    saved = panel.fields()
    again = GeneratePanel()
    qtbot.addWidget(again)
    again.restore_fields(saved)
    assert again.settings().guidance_patches == panel.settings().guidance_patches
    assert [p.name for p in again.settings().guidance_patches] == ["pag", "apg"]
