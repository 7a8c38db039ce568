"""The Generate panel's image prompt row (IP-Adapter, FLUX Redux): in the settings it emits once both
files are picked, and a picture's IP-Adapter numbers and Redux strength and strength type read back
into it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.gui.dock_layout import WIDE
from app.gui.generate_panel import GeneratePanel
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.generate.workflow_request import IpAdapterUse, ReduxUse


@pytest.fixture
def panel(qtbot: QtBot) -> GeneratePanel:
    p = GeneratePanel()
    qtbot.addWidget(p)
    p.show()
    return p


def test_the_row_gives_an_image_prompt_once_both_files_are_picked(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    panel.prompt.setPlainText("a cat")
    w = panel.workflows
    w.setChecked(True)
    row = w.image_prompt
    row.adapter.set_path(tmp_path / "ip-adapter_sd15.safetensors")
    assert panel.settings().ip_adapters == ()  # no picture yet
    row.picture.set_path(tmp_path / "cat.png")
    row.weight.setValue(0.7)
    row.start.setValue(0.9)  # the ends in the wrong order are put in order
    row.end.setValue(0.2)
    assert panel.settings().ip_adapters == (
        IpAdapterUse(tmp_path / "ip-adapter_sd15.safetensors", tmp_path / "cat.png", 0.7, 0.2, 0.9),
    )
    row.weight_type.setCurrentText("style transfer")
    row.mask.set_path(tmp_path / "left.png")
    (use,) = panel.settings().ip_adapters
    assert (use.weight_type, use.mask) == ("style transfer", tmp_path / "left.png")
    row.scaling.setCurrentText("K+mean(V) w/ C penalty")
    assert panel.settings().ip_adapters[0].scaling == "K+mean(V) w/ C penalty"


def test_a_pictures_image_prompt_numbers_come_back(panel: GeneratePanel) -> None:
    item = (
        "Model: ip-adapter_sd15 [0123456789], Image: cat.png: 0123456789ab, Weight: 0.6, Start: 0.1, "
        "End: 0.8, Encoder: vit-h, Weight type: ease in-out, Mask: left.png: 0123456789ab, "
        "Embeds scaling: K+V w/ C penalty"
    )
    text = format_parameters(GenerationParameters("x", extra={"IP-Adapter 0": item}))
    panel.apply_parameters(parse_parameters(text))
    row = panel.workflows.image_prompt
    assert panel.workflows.isChecked()
    assert (row.weight.value(), row.start.value(), row.end.value()) == (0.6, 0.1, 0.8)
    assert row.weight_type.currentText() == "ease in-out"
    assert row.scaling.currentText() == "K+V w/ C penalty"


def test_the_redux_row_gives_a_redux_picture_and_its_strength_comes_back(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    panel.prompt.setPlainText("a cat")
    w = panel.workflows
    w.setChecked(True)
    row = w.image_prompt
    row.redux.set_path(tmp_path / "flux1-redux-dev.safetensors")
    assert panel.settings().redux == ()  # no picture yet
    row.redux_picture.set_path(tmp_path / "photo.png")
    row.redux_strength.setValue(0.6)
    assert panel.settings().redux == (
        ReduxUse(tmp_path / "flux1-redux-dev.safetensors", tmp_path / "photo.png", 0.6),
    )
    row.redux_type.setCurrentText("attn_bias")
    assert panel.settings().redux[0].strength_type == "attn_bias"
    assert panel.minimumSizeHint().width() <= WIDE["generate"]  # the Generate column (400 px)
    item = (
        "Model: flux1-redux-dev [0123456789], Picture: photo.png [0123456789ab], Strength: 0.35, "
        "Type: multiply"
    )
    panel.apply_parameters(
        parse_parameters(format_parameters(GenerationParameters("x", extra={"Redux 0": item})))
    )
    assert (row.redux_strength.value(), row.redux_type.currentText()) == (0.35, "multiply")
    item = item.replace("0.35", "2.5").replace("multiply", "attn_bias")
    panel.apply_parameters(
        parse_parameters(format_parameters(GenerationParameters("x", extra={"Redux 0": item})))
    )
    assert (row.redux_strength.value(), row.redux_type.currentText()) == (2.5, "attn_bias")


def test_the_block_weight_controls_follow_the_weight_type_and_fit_the_column(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    from app.gui.dock_layout import WIDE
    from core.errors import LoadoutError

    panel.prompt.setPlainText("a cat")
    panel.workflows.setChecked(True)
    row = panel.workflows.image_prompt
    row.adapter.set_path(tmp_path / "ip-adapter_sdxl.safetensors")
    row.picture.set_path(tmp_path / "cat.png")
    assert not row.composing.isVisible() and not row.boosting.isVisible()
    row.weight_type.setCurrentText("style and composition")
    assert row.composing.isVisible() and not row.boosting.isVisible()
    row.composition.set_path(tmp_path / "room.png")
    row.composition_weight.setValue(0.5)
    (use,) = panel.settings().ip_adapters
    assert (use.composition, use.composition_weight, use.boost) == (tmp_path / "room.png", 0.5, None)
    row.weight_type.setCurrentText("style transfer precise")
    assert not row.composing.isVisible() and row.boosting.isVisible()
    (use,) = panel.settings().ip_adapters
    assert (use.composition, use.boost) == (None, None)  # unchecked: the pack's default (the weight)
    row.boosted.setChecked(True)
    row.boost.setValue(1.5)
    row.layers.setText("3:2.5, 6:1")
    (use,) = panel.settings().ip_adapters
    assert (use.boost, use.layer_weights) == (1.5, ((3, 2.5), (6, 1.0)))
    assert panel.minimumSizeHint().width() <= WIDE["generate"]
    row.layers.setText("3:2.5 6:1")
    with pytest.raises(LoadoutError, match="INDEX:WEIGHT"):
        panel.settings()


def test_a_pictures_block_weights_come_back(panel: GeneratePanel) -> None:
    item = (
        "Model: ip-adapter_sdxl [0123456789], Image: cat.png: 0123456789ab, Weight: 0.6, Start: 0, "
        "End: 1, Encoder: vit-h, Weight type: composition precise, Boost: 0.3, Layer weights: 3:2.5,6:1"
    )
    text = format_parameters(GenerationParameters("x", extra={"IP-Adapter 0": item}))
    panel.apply_parameters(parse_parameters(text))
    row = panel.workflows.image_prompt
    assert row.weight_type.currentText() == "composition precise" and row.boosting.isVisible()
    assert (row.boosted.isChecked(), row.boost.value(), row.layers.text()) == (True, 0.3, "3:2.5, 6:1")
