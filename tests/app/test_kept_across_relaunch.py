"""Everything the loop needs is kept across a relaunch (issue 30): the prompt, negative and settings,
the loaded model and its LoRA stack at its strengths (offered with one click), and the queue's
grids in the Gallery, labelled by grid and cell."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QColor, QImage

from app.demo import DemoLibrary
from app.gui.gallery import GalleryPanel, picture_label


def _ready(qtbot, window, path) -> None:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(path)).isValid() and not window.backend.busy, timeout=30000
    )


def test_prompt_settings_model_and_lora_stack_come_back_after_a_relaunch(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder)
    _ready(qtbot, window, demo_library.checkpoint)
    window.load_path(demo_library.checkpoint)
    qtbot.waitUntil(lambda: window.stack.model_family == "sd1" and not window.backend.busy, timeout=30000)
    window.backend.add_lora(demo_library.lora, 0.7, 0.4)
    qtbot.waitUntil(lambda: len(window.stack.loras) == 1 and not window.backend.busy, timeout=30000)
    panel = window.generate_panel
    panel.prompt.setPlainText("a lighthouse at dusk")
    panel.negative.setPlainText("blurry")
    panel.steps.setValue(13)
    panel.cfg.setValue(4.5)
    panel.sampler.setCurrentIndex(panel.sampler.findData("dpmpp_2m"))
    panel.width_.setValue(384)
    window.close()

    again = make_window(demo_library.folder)  # the same settings file
    panel = again.generate_panel
    assert panel.prompt.toPlainText() == "a lighthouse at dusk" and panel.negative.toPlainText() == "blurry"
    _ready(qtbot, again, demo_library.checkpoint)
    qtbot.waitUntil(lambda: again.message.isVisible() and again.message.action.isVisible(), timeout=30000)
    assert demo_library.checkpoint.name in again.message.text.text() and "1 LoRA" in again.message.text.text()
    again.message.action.click()  # "Load again": one click
    qtbot.waitUntil(lambda: len(again.stack.loras) == 1 and not again.backend.busy, timeout=30000)
    (lora,) = again.stack.loras
    assert lora.path == demo_library.lora and (lora.model_strength, lora.clip_strength) == (0.7, 0.4)
    # the family's defaults did not replace the settings of last time
    assert (panel.steps.value(), panel.cfg.value(), panel.sampler.currentData()) == (13, 4.5, "dpmpp_2m")
    assert panel.width_.value() == 384


def test_grid_cells_are_labelled_by_their_grid_in_the_gallery(qtbot, tmp_path: Path) -> None:
    """Two grids' cells were both named "x0-y0-z0"; grid pictures made later join the gallery."""
    out = tmp_path / "out"
    for grid in ("20261126-101010", "20261127-090909"):
        (out / "grids" / grid).mkdir(parents=True)
        image = QImage(8, 8, QImage.Format.Format_RGB32)
        image.fill(QColor("red"))
        assert image.save(str(out / "grids" / grid / "x0-y0-z0.png"))
    gallery = GalleryPanel()
    qtbot.addWidget(gallery)
    gallery.set_folder(out)
    labels = sorted(gallery.strip.item(i).text() for i in range(gallery.strip.count()))
    assert labels == ["20261126-101010 x0-y0-z0", "20261127-090909 x0-y0-z0"]
    assert picture_label(out / "20261127" / "00001-5.png") == "00001-5"
    cell = out / "grids" / "20261127-090909" / "x0-y0-z0.png"
    gallery.add_files([(cell, "#3 seed 5")])
    assert gallery.strip.item(0).text() == "#3 seed 5" and gallery.strip.count() == 2
    qtbot.waitUntil(lambda: not gallery.loading())
