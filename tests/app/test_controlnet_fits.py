"""The Generate panel's ControlNet rows list the library's ControlNets that fit the loaded model
first, the others greyed after a separator (app/gui/controlnet_rows.py), by the engine's rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.detect.catalog import controlnet_family_for, controlnet_fits
from core.detect.spec import NO_MODEL_DEFAULTS
from core.generate.workflows import ControlNetParameters


@pytest.fixture
def panel(qtbot: QtBot) -> GeneratePanel:
    p = GeneratePanel()
    qtbot.addWidget(p)
    return p


def _listed(combo: QComboBox) -> list[tuple[str, bool]]:
    """Each line of the combo and whether it can be chosen ("" is the separator)."""
    model, enabled = combo.model(), Qt.ItemFlag.ItemIsEnabled
    return [(combo.itemText(i), bool(model.flags(model.index(i, 0)) & enabled)) for i in range(combo.count())]


def test_the_controlnets_that_fit_the_loaded_model_come_first_the_others_greyed(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    canny, depth, odd = (
        tmp_path / n for n in ("canny.safetensors", "depth-xl.safetensors", "odd.safetensors")
    )
    nets = panel.workflows.controlnets
    nets.set_choices((canny, depth, odd), {canny: "sd1", depth: "sdxl", odd: None})
    row = nets.rows[0]
    combo = row.controlnet.combo
    everything = [("none", True), ("canny", True), ("depth-xl", True), ("odd", True)]
    assert _listed(combo) == everything  # no model loaded: all alike
    row.controlnet.set_path(depth)

    panel.set_family("sd1", NO_MODEL_DEFAULTS)  # a model is loaded (the controller's models_changed)
    sd1 = [("none", True), ("canny", True), ("odd", True), ("", False), ("depth-xl (for sdxl)", False)]
    assert _listed(combo) == sd1  # an unknown family is never ruled out
    assert row.controlnet.path == depth  # the chosen file stays chosen: the engine says why it does not fit
    assert "does not fit" in combo.itemData(
        4, Qt.ItemDataRole.ToolTipRole
    )  # the tooltip says why it is greyed
    assert _listed(nets.add_row().controlnet.combo) == sd1  # a new row lists them the same way

    panel.set_family("sdxl", NO_MODEL_DEFAULTS)  # another model: the rows follow
    sdxl = [("none", True), ("depth-xl", True), ("odd", True), ("", False), ("canny (for sd1)", False)]
    assert [_listed(r.controlnet.combo) for r in nets.rows] == [sdxl, sdxl]

    panel.set_family(None, NO_MODEL_DEFAULTS)  # unloaded
    assert _listed(combo) == everything


def test_the_rows_and_the_engine_use_one_rule() -> None:
    """The rows' rule is the engine's ``wrong_controlnet`` check: SDXL's ControlNets on SSD-1B."""
    assert controlnet_fits("sdxl", "ssd-1b") and controlnet_family_for("ssd-1b") == "sdxl"
    assert not controlnet_fits("sd1", "sdxl") and controlnet_fits(None, "sdxl")
    assert not controlnet_fits("sd1", "flux") and controlnet_fits(None, "flux")


def test_a_z_image_model_is_offered_its_fun_controlnet(panel: GeneratePanel, tmp_path: Path) -> None:
    fun, canny = (
        tmp_path / "Z-Image-Turbo-Fun-Controlnet-Union-2.1.safetensors",
        tmp_path / "canny.safetensors",
    )
    nets = panel.workflows.controlnets
    nets.set_choices((fun, canny), {fun: "z-image", canny: "sd1"})
    combo = nets.rows[0].controlnet.combo
    panel.set_family("z-image", NO_MODEL_DEFAULTS)
    fits = [
        ("none", True),
        ("Z-Image-Turbo-Fun-Controlnet-Union-2.1", True),
        ("", False),
        ("canny (for sd1)", False),
    ]
    assert _listed(combo) == fits
    panel.set_family("lumina2", NO_MODEL_DEFAULTS)  # the same network, another family: not its ControlNet
    assert ("Z-Image-Turbo-Fun-Controlnet-Union-2.1 (for z-image)", False) in _listed(combo)
    assert controlnet_family_for("z-image") == "z-image" and not controlnet_fits("z-image", "lumina2")


def test_qwen_image_models_are_offered_instantx_controlnets(panel: GeneratePanel, tmp_path: Path) -> None:
    """InstantX's union and inpainting nets (detected as ``qwen-image``) on Qwen-Image and its Edit
    models, greyed for the others."""
    union, canny = (
        tmp_path / "Qwen-Image-InstantX-ControlNet-Union.safetensors",
        tmp_path / "canny.safetensors",
    )
    nets = panel.workflows.controlnets
    nets.set_choices((union, canny), {union: "qwen-image", canny: "sd1"})
    combo = nets.rows[0].controlnet.combo
    for family in ("qwen-image", "qwen-image-edit", "qwen-image-edit-2511"):
        panel.set_family(family, NO_MODEL_DEFAULTS)
        assert _listed(combo) == [
            ("none", True), ("Qwen-Image-InstantX-ControlNet-Union", True), ("", False),
            ("canny (for sd1)", False),
        ]  # fmt: skip
    panel.set_family("flux-dev", NO_MODEL_DEFAULTS)
    assert ("Qwen-Image-InstantX-ControlNet-Union (for qwen-image)", False) in _listed(combo)


def test_sd3_controlnets_are_offered_for_the_sd3_models_they_fit(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    """Stability's SD3.5 Large ControlNets for Large only; InstantX's SD3 Medium ones for SD3 and
    SD3.5 Medium (as wide, as deep); none of them for Flux."""
    large, medium = tmp_path / "sd3.5_large_controlnet_canny.safetensors", tmp_path / "sd3_canny.safetensors"
    nets = panel.workflows.controlnets
    nets.set_choices((large, medium), {large: "sd3.5-large", medium: "sd3"})
    combo = nets.rows[0].controlnet.combo
    panel.set_family("sd3.5-large", NO_MODEL_DEFAULTS)
    stem_l, stem_m = large.stem, medium.stem
    assert _listed(combo) == [("none", True), (stem_l, True), ("", False), (f"{stem_m} (for sd3)", False)]
    panel.set_family("sd3.5-medium", NO_MODEL_DEFAULTS)
    assert _listed(combo) == [
        ("none", True),
        (stem_m, True),
        ("", False),
        (f"{stem_l} (for sd3.5-large)", False),
    ]
    assert not controlnet_fits("sd3", "flux-dev") and not controlnet_fits("sd3.5-large", "sd3.5-medium")
    assert controlnet_family_for("sd3.5-large") == "sd3.5-large" and controlnet_family_for("sd3") == "sd3"


def test_flux_controlnets_are_offered_for_every_flux1_model(panel: GeneratePanel, tmp_path: Path) -> None:
    """InstantX / XLabs files (detected as flux-dev, or flux-schnell without a guidance embedding)
    fit every FLUX.1 model, by the table the engine's check reads; an SDXL one does not."""
    union, xlabs, canny = (
        tmp_path / n for n in ("union.safetensors", "xlabs.safetensors", "canny.safetensors")
    )
    nets = panel.workflows.controlnets
    nets.set_choices((union, xlabs, canny), {union: "flux-dev", xlabs: "flux-schnell", canny: "sdxl"})
    for model in ("flux-dev", "flux-schnell", "flux-kontext", "flux-fill"):
        panel.set_family(model, NO_MODEL_DEFAULTS)
        offered = [("none", True), ("union", True), ("xlabs", True), ("", False), ("canny (for sdxl)", False)]
        assert _listed(nets.rows[0].controlnet.combo) == offered, model
    panel.set_family("sdxl", NO_MODEL_DEFAULTS)
    assert ("union (for flux-dev)", False) in _listed(nets.rows[0].controlnet.combo)
    assert not controlnet_fits("flux-dev", "flux2-dev") and not controlnet_fits("flux-dev", "chroma")


def test_a_flux_rows_union_type_is_chosen_and_read_back(panel: GeneratePanel, tmp_path: Path) -> None:
    union, canny, hint = (tmp_path / n for n in ("union.safetensors", "canny.safetensors", "h.png"))
    nets = panel.workflows.controlnets
    nets.set_choices((union, canny), {union: "flux-dev", canny: "sd1"})
    row = nets.rows[0]
    row.controlnet.set_path(canny)
    assert row.control_type.isHidden()  # an SD1 ControlNet has no types
    row.controlnet.set_path(union)
    assert not row.control_type.isHidden()
    assert [row.control_type.itemText(i) for i in range(4)] == ["auto", "canny", "tile", "depth"]
    row.hint.set_path(hint)
    use = row.use()
    assert use is not None and use.control_type is None  # auto
    row.control_type.setCurrentText("depth")
    use = row.use()
    assert use is not None and use.control_type == "depth"
    row.show_parameters(ControlNetParameters("union", 0.5, 0.0, 1.0, control_type="pose"))
    assert row.chosen_type == "pose"


def test_a_z_image_fun_row_takes_no_hint_the_others_need_one(panel: GeneratePanel, tmp_path: Path) -> None:
    """A Z-Image Fun ControlNet may inpaint with no hint (ComfyUI's node with no image): its row
    goes into the request without one and says so; an SDXL row without a hint is left out."""
    fun, canny, hint = (tmp_path / n for n in ("fun.safetensors", "canny.safetensors", "h.png"))
    nets = panel.workflows.controlnets
    nets.set_choices((fun, canny), {fun: "z-image", canny: "sdxl"})
    row = nets.rows[0]
    row.controlnet.set_path(canny)
    assert row.use() is None and nets.uses() == ()
    row.controlnet.set_path(fun)
    use = row.use()
    assert use is not None and use.path == fun and use.hint is None
    assert row.hint.label.text() == "none (inpaints alone)" and "inpaint" in row.hint.toolTip()
    row.hint.set_path(hint)
    use = row.use()
    assert use is not None and use.hint == hint
    row.hint.set_path(None)
    row.controlnet.set_path(canny)
    assert row.use() is None and row.hint.label.text() == "none"
