"""A family's usual guidance patches (its record's ``GenerationDefaults.patches``): CFGNorm at
strength 1 on the Qwen-Image-Edit families, as ComfyUI's edit templates put it on the model; on in
a request that leaves the patches to the family (the CLI without ``--patch``), off with
``--patch none`` or any patch given; the window switches them on with the model and the artist
can switch them off; the PNG names them as every patch."""

from __future__ import annotations

from dataclasses import replace

from pytestqt.qtbot import QtBot

from app.cli import build_parser
from app.commands.generate_cmd import _request
from app.gui.generate_panel import GeneratePanel
from core.detect.catalog import REGISTRY, generation_defaults
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.generate.request import with_family_defaults
from core.guidance import PATCHES
from core.guidance.cfg_level import CfgNorm
from core.guidance.perturbed import Pag

BASE = ["generate", "m.safetensors", "--prompt", "a fox", "-o", "fox.png"]


def test_every_family_names_patches_that_exist_and_the_edit_families_take_cfg_norm() -> None:
    for fam in REGISTRY:
        spec = fam.diffusion
        if spec is not None:
            assert set(spec.defaults.patches) <= set(PATCHES), fam.id
    for family in ("qwen-image-edit", "qwen-image-edit-2511"):
        assert generation_defaults(family).patches == ("cfg_norm",)
    assert generation_defaults("qwen-image").patches == () and generation_defaults("sdxl").patches == ()


def test_a_request_without_patches_takes_the_familys_and_none_switches_them_off() -> None:
    request = _request(build_parser().parse_args(BASE))
    assert "patches" in request.family_defaults and request.image.guidance_patches == ()
    edit = with_family_defaults(
        request.image, generation_defaults("qwen-image-edit"), request.family_defaults
    )
    assert edit.guidance_patches == (CfgNorm(),)
    plain = with_family_defaults(request.image, generation_defaults("qwen-image"), request.family_defaults)
    assert plain.guidance_patches == ()
    off = _request(build_parser().parse_args([*BASE, "--patch", "none"]))
    assert "patches" not in off.family_defaults
    none = with_family_defaults(off.image, generation_defaults("qwen-image-edit"), off.family_defaults)
    assert none.guidance_patches == ()
    mine = _request(build_parser().parse_args([*BASE, "--patch", "pag:scale=2"]))
    made = with_family_defaults(mine.image, generation_defaults("qwen-image-edit"), mine.family_defaults)
    assert made.guidance_patches == (Pag(scale=2.0),)  # the user's list, not the family's


def test_the_png_names_the_familys_patch() -> None:
    text = format_parameters(GenerationParameters("a fox", steps=20, seed=1, patches=(CfgNorm(),)))
    assert parse_parameters(text).patches == (CfgNorm(),)


def test_the_window_switches_them_on_with_the_model_and_off_with_another(qtbot: QtBot) -> None:
    panel = GeneratePanel()
    qtbot.addWidget(panel)
    panel.set_family("qwen-image-edit", generation_defaults("qwen-image-edit"))
    assert panel.settings().guidance_patches == (CfgNorm(),) and panel.guidance_patches.isChecked()
    panel.guidance_patches.rows["cfg_norm"].on.setChecked(False)  # the artist switches it off
    assert panel.settings().guidance_patches == ()
    panel.set_family("qwen-image-edit-2511", generation_defaults("qwen-image-edit-2511"))
    assert panel.settings().guidance_patches == ()  # the same usual patches: the choice is kept
    panel.guidance_patches.rows["pag"].on.setChecked(True)
    panel.set_family("sdxl", generation_defaults("sdxl"))
    assert [p.name for p in panel.settings().guidance_patches] == ["pag"]  # the artist's own stays
    panel.set_family("qwen-image-edit", replace(generation_defaults("qwen-image-edit")))
    assert [p.name for p in panel.settings().guidance_patches] == ["pag", "cfg_norm"]
