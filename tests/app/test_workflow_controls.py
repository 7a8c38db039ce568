"""The Generate panel's workflow box: ControlNet, inpainting and refiner fields in the settings it
emits, and a dropped picture's ControlNet / refiner parameters read back into it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QKeySequence
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.generate.workflow_request import ControlNetUse, RefinerUse
from core.generate.workflows import controlnet_parameter


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
    editor.feather.setValue(0)  # a hard edge: the stroke reads exactly
    canvas = editor.canvas
    QTest.mousePress(canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(10, 30))
    for x in range(12, 80, 4):
        QTest.mouseMove(canvas, QPoint(x, 30))
    QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(80, 30))
    mask = read_mask(editor.save(tmp_path / "mask.png"))
    assert mask.shape == (64, 96)
    assert mask[30, 20] == 1.0 and mask[30, 70] == 1.0  # along the stroke: repaint
    assert mask[5, 5] == 0.0 and mask[60, 90] == 0.0  # elsewhere: keep


def test_the_mask_editor_undoes_clears_feathers_and_keeps_masks_out_of_the_gallery(
    qtbot: QtBot, tmp_path: Path
) -> None:
    """Issue 30: the mask editor had no undo, clear or feather, and saved masks beside the picture,
    into the output folder the Gallery lists."""
    import numpy as np
    from PIL import Image
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtTest import QTest

    from app.gui.gallery import pictures_in
    from app.gui.mask_editor import MaskEditor, mask_folder
    from core.generate.pictures import read_mask

    outputs = tmp_path / "outputs"
    picture = outputs / "2026-11-27" / "00001-5.png"
    picture.parent.mkdir(parents=True)
    Image.fromarray(np.full((64, 96, 3), 90, np.uint8)).save(picture)
    editor = MaskEditor(picture)
    qtbot.addWidget(editor)
    editor.show()
    editor.activateWindow()
    qtbot.waitUntil(editor.isActiveWindow)
    canvas = editor.canvas
    editor.size_slider.setValue(20)

    def stroke(y: int) -> None:
        QTest.mousePress(canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(10, y))
        QTest.mouseMove(canvas, QPoint(80, y))
        QTest.mouseRelease(canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(80, y))

    def painted() -> int:
        return sum(canvas.mask.pixelColor(x, y).value() > 0 for x in range(0, 96, 4) for y in range(0, 64, 4))

    stroke(15)
    one = painted()
    stroke(50)
    assert painted() > one > 0
    QTest.keySequence(editor, QKeySequence.StandardKey.Undo)  # Ctrl+Z: the second stroke goes
    assert painted() == one
    editor.canvas.clear()
    assert painted() == 0
    editor.canvas.undo()  # a clear is undone too
    assert painted() == one
    editor.feather.setValue(12)
    saved = editor.save(mask_folder() / "test-feather-mask.png")
    try:
        mask = read_mask(saved)
        assert mask[15, 45] > 0.8 and mask[60, 45] == 0.0
        edge = mask[:, 45]
        assert ((edge > 0.05) & (edge < 0.95)).sum() >= 6  # a soft edge, not a step
        assert outputs not in saved.parents and picture.parent not in saved.parents
        assert pictures_in(outputs) == [picture]  # the Gallery shows the picture only
    finally:
        saved.unlink()


def _two_rows(panel: GeneratePanel, tmp_path: Path) -> None:
    nets = panel.workflows.controlnets
    panel.workflows.setChecked(True)
    first = nets.rows[0]
    first.controlnet.set_path(tmp_path / "canny.safetensors")
    first.hint.set_path(tmp_path / "edges.png")
    first.strength.setValue(0.6)
    second = nets.add_row()
    second.controlnet.set_path(tmp_path / "depth.safetensors")
    second.hint.set_path(tmp_path / "depth.png")
    second.strength.setValue(0.4)
    second.start.setValue(0.1)
    second.end.setValue(0.7)


def test_two_controlnets_reach_the_request_in_order_with_their_numbers(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    _two_rows(panel, tmp_path)
    rows = panel.workflows.controlnets.rows
    assert [r.number.text() for r in rows] == ["ControlNet 0", "ControlNet 1"]  # as the PNG numbers them
    assert panel.settings().controlnets == (
        ControlNetUse(tmp_path / "canny.safetensors", tmp_path / "edges.png", 0.6, 0.0, 1.0),
        ControlNetUse(tmp_path / "depth.safetensors", tmp_path / "depth.png", 0.4, 0.1, 0.7),
    )
    third = panel.workflows.controlnets.add_row()  # no file or hint yet: left out, not an error
    assert third.number.text() == "ControlNet 2" and len(panel.settings().controlnets) == 2


def test_remove_takes_its_row_out_and_the_last_one_is_cleared(panel: GeneratePanel, tmp_path: Path) -> None:
    _two_rows(panel, tmp_path)
    nets = panel.workflows.controlnets
    nets.rows[0].remove_button.click()
    assert len(nets.rows) == 1 and nets.rows[0].number.text() == "ControlNet 0"
    assert panel.settings().controlnets == (
        ControlNetUse(tmp_path / "depth.safetensors", tmp_path / "depth.png", 0.4, 0.1, 0.7),
    )
    nets.rows[0].remove_button.click()
    assert len(nets.rows) == 1 and nets.rows[0].controlnet.path is None and nets.rows[0].hint.path is None
    assert panel.settings().controlnets == ()


def test_several_controlnets_round_trip_through_a_pictures_parameters(
    panel: GeneratePanel, qtbot: QtBot, tmp_path: Path
) -> None:
    library = (tmp_path / "lib" / "canny.safetensors", tmp_path / "lib" / "depth.safetensors")
    _two_rows(panel, tmp_path)
    sent = panel.settings().controlnets
    items = dict(
        controlnet_parameter(i, f"{Path(u.path).stem} [0123abcd]", u.strength, u.start, u.end)
        for i, u in enumerate(sent)
    )  # as a generation writes them: A1111's "ControlNet 0", "ControlNet 1"
    text = format_parameters(GenerationParameters("x", extra=items))
    again = GeneratePanel()  # a fresh window: one empty row, the library's ControlNets listed
    qtbot.addWidget(again)
    again.workflows.controlnets.set_choices(library)
    again.apply_parameters(parse_parameters(text))
    rows = again.workflows.controlnets.rows
    assert again.workflows.isChecked() and len(rows) == 2
    assert [r.controlnet.path for r in rows] == list(library)  # found in the library by name
    for row, use in zip(rows, sent, strict=True):
        assert (row.strength.value(), row.start.value(), row.end.value()) == (
            use.strength,
            use.start,
            use.end,
        )
        row.hint.set_path(Path(use.hint))  # hints are not in the parameters: the user's to pick
    got = again.settings().controlnets
    assert [(Path(u.path).name, u.strength, u.start, u.end) for u in got] == [
        (Path(u.path).name, u.strength, u.start, u.end) for u in sent
    ]
    one = format_parameters(
        GenerationParameters("x", extra=dict([controlnet_parameter(0, "other", 1, 0, 1)]))
    )
    again.apply_parameters(parse_parameters(one))  # fewer ControlNets: rows go; an unknown file is not kept
    assert (
        len(rows) == 1 and rows[0].controlnet.path is None and "other" in rows[0].controlnet.combo.toolTip()
    )


def test_the_librarys_controlnets_are_offered_in_every_row(qtbot: QtBot, make_window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.fixtures.controlnets import tiny_controlnet_file

    folder = tmp_path / "models" / "controlnet"
    folder.mkdir(parents=True)
    net = tiny_controlnet_file(folder / "canny-tiny.safetensors")
    window = make_window(tmp_path / "models")
    nets = window.generate_panel.workflows.controlnets
    qtbot.waitUntil(lambda: nets.choices == (net,), timeout=30000)
    qtbot.waitUntil(lambda: nets.families == {net: "sd1"}, timeout=30000)  # what fits is listed first
    row = nets.add_row()
    combo = row.controlnet.combo
    assert [combo.itemText(i) for i in range(combo.count())] == ["none", "canny-tiny"]
    combo.setCurrentIndex(1)
    assert row.controlnet.path == net
    net.unlink()  # gone from the library: a rescan stops offering it (the chosen row keeps its file)
    window.rescan()
    qtbot.waitUntil(lambda: nets.choices == (), timeout=30000)
    assert nets.rows[0].controlnet.combo.count() == 1 and row.controlnet.path == net


def test_the_hint_and_starting_pictures_show_a_thumbnail_and_an_unticked_box_is_off(
    qtbot: QtBot, tmp_path: Path
) -> None:
    """Issue 30: the ControlNet hint had no thumbnail; the box looked enabled while unticked."""
    import numpy as np
    from PIL import Image

    panel = GeneratePanel()
    qtbot.addWidget(panel)
    box = panel.workflows
    assert not box.isChecked() and not box.controlnets.rows[0].hint.isEnabled()  # unticked: off
    edges = tmp_path / "edges.png"
    Image.fromarray(np.full((300, 200, 3), 255, np.uint8)).save(edges)
    box.setChecked(True)
    hint = box.controlnets.rows[0].hint
    hint.set_path(edges)
    thumb = hint.thumb.pixmap()
    assert hint.isEnabled() and not thumb.isNull() and thumb.height() == 28 and thumb.width() < 28
    box.init.set_path(edges)
    assert not box.init.thumb.pixmap().isNull()
    hint.set_path(None)
    assert hint.thumb.pixmap().isNull() and hint.label.text() != "edges.png"


def test_generate_is_off_while_a_chosen_row_misses_its_picture(panel: GeneratePanel, tmp_path: Path) -> None:
    """One rule for every row (``WorkflowControls.missing``): a chosen file without the picture it
    reads turns Generate off with words saying what to pick; given or cleared, Generate is back.
    A Z-Image Fun net inpaints alone: it needs its hint only while nothing is inpainted."""
    panel.set_available(True)
    button, w = panel.generate_button, panel.workflows

    def says(start: str) -> bool:
        texts = (button.toolTip(), panel.status.text())
        return not button.isEnabled() and all(t.startswith(start) for t in texts)

    w.image_prompt.adapter.set_path(tmp_path / "ip-adapter_sd15.safetensors")
    assert button.isEnabled()  # the box is off: its rows are not used
    w.setChecked(True)
    assert says("The IP-Adapter needs its picture: pick the image prompt")
    w.image_prompt.picture.set_path(tmp_path / "face.png")
    assert button.isEnabled() and panel.status.text() == "Ready: Ctrl+Enter generates."
    w.image_prompt.redux.set_path(tmp_path / "flux1-redux-dev.safetensors")
    assert says("FLUX Redux needs its picture")
    w.image_prompt.redux.set_path(None)  # cleared: no longer needed
    w.outpaint.sides["left"].setValue(64)
    assert says("Outpainting needs a picture to start from")
    w.outpaint.sides["left"].setValue(0)
    fun = tmp_path / "Z-Image-Turbo-Fun-Controlnet-Union-2.1.safetensors"
    canny = tmp_path / "canny.safetensors"
    w.controlnets.set_choices((fun, canny), {fun: "z-image", canny: "sd1"})
    w.controlnets.add_row().controlnet.set_path(fun)
    assert says("ControlNet 1 (Z-Image-Turbo-Fun-Controlnet-Union-2.1) needs a hint picture unless")
    w.init.set_path(tmp_path / "photo.png")
    w.mask.set_path(tmp_path / "mask.png")  # it inpaints alone
    assert button.isEnabled()
    w.controlnet.set_path(canny)  # row 0: a net that never runs without a hint
    assert says("ControlNet 0 (canny) needs a hint picture")
    w.controlnets.remove_row(w.controlnets.rows[0])
    assert button.isEnabled() and len(panel.settings().controlnets) == 1
    w.setChecked(False)
    w.controlnet.set_path(None)
    assert button.isEnabled()
