"""The picture first: the central viewer (fit, 100 %, wheel zoom, pan), the gallery of the output
folder (earlier runs too, newest first), double-click to view, and the picture menu (copy
parameters, use these settings with the LoRAs applied to the stack, delete after asking)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QGuiApplication, QImage, QWheelEvent
from PySide6.QtWidgets import QGraphicsView

from app.demo import DemoLibrary
from app.gui.gallery import THUMB, GalleryPanel
from app.gui.menus import about_text, app_version
from app.gui.viewer import PicturePanel
from core.generate.events import GeneratedImage, GenerateResult
from core.generate.parameters import GenerationParameters, LoraUse, format_parameters, parse_parameters
from core.generate.png import read_png_parameters, save_png
from tests.app.test_generate_window import _load
from tests.app.util import strict


def _picture(path: Path, w: int = 64, h: int = 32, **params: object) -> Path:
    p = GenerationParameters(**{"prompt": "a castle", "seed": 42, "width": w, "height": h, **params})  # type: ignore[arg-type]
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_png(path, np.full((h, w, 3), 120, np.uint8), format_parameters(p))


def _wheel(view: QGraphicsView, notches: int) -> None:
    centre = QPointF(view.viewport().rect().center())
    where = view.mapToGlobal(centre.toPoint()).toPointF()
    buttons, keys = Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    phase = Qt.ScrollPhase.NoScrollPhase
    delta = QPoint(0, 120 * notches)
    view.wheelEvent(QWheelEvent(centre, where, QPoint(), delta, buttons, keys, phase, False))


def test_the_viewer_fits_shows_100_percent_zooms_with_the_wheel_and_pans(qtbot, tmp_path: Path) -> None:
    panel = PicturePanel()
    qtbot.addWidget(panel)
    panel.resize(800, 600)
    panel.show()
    big = _picture(tmp_path / "big.png", 2048, 1024)
    panel.show_image(big, "a castle")
    qtbot.wait(20)
    view = panel.view
    viewport = view.viewport().size()
    assert abs(view.zoom() - min(viewport.width() / 2048, viewport.height() / 1024)) < 1e-6  # fit
    assert "big.png" in panel.caption.text()
    panel.buttons["100"].click()
    assert view.zoom() == 1.0 and view.horizontalScrollBar().maximum() > 0  # larger than the view
    assert view.dragMode() == QGraphicsView.DragMode.ScrollHandDrag  # drag to pan
    view.horizontalScrollBar().setValue(300)
    assert view.mapToScene(0, 0).x() >= 299
    _wheel(view, 2)
    assert abs(view.zoom() - 1.25**2) < 1e-6
    _wheel(view, -3)
    assert abs(view.zoom() - 1.25**-1) < 1e-6
    qtbot.mouseDClick(view.viewport(), Qt.MouseButton.LeftButton)  # back to fit
    assert view.fitting and view.zoom() < 0.5


def test_the_gallery_lists_earlier_pictures_newest_first_and_opens_them(
    qtbot, make_window, tmp_path: Path
) -> None:
    out = tmp_path / "pictures"  # the window's output folder in these tests
    older = _picture(out / "2026-11-20" / "00000-1.png")
    newer = _picture(out / "2026-11-24" / "00003-2.png", 32, 64)
    os.utime(older, (1_700_000_000, 1_700_000_000))
    window = make_window()
    gallery = window.gallery
    assert gallery.paths() == [newer, older]
    qtbot.waitUntil(lambda: not gallery.loading(), timeout=5000)  # thumbnails, one per event-loop turn
    assert not gallery.strip.item(0).icon().isNull()
    gallery.strip.itemDoubleClicked.emit(gallery.strip.item(1))
    assert window.picture.view.path == older and window.picture.view.pixmap().width() == 64
    assert "Seed: 42" in window.picture.infotext


def test_the_picture_menu_copies_parameters_and_deletes_after_asking(
    qtbot, make_window, tmp_path: Path
) -> None:
    path = _picture(tmp_path / "pictures" / "2026-11-25" / "00001-42.png")
    window = make_window()
    menu = window.pictures.menu
    actions = [a.text() for a in menu.menu(path).actions() if a.text()]
    assert actions == [
        "View here",
        "Open",
        "Show in folder",
        "Copy parameters",
        "Use these settings",
        "Edit this picture",
        "Delete…",
    ]
    # "Edit this picture": the first reference slot, once the loaded family takes references
    assert not window.pictures.edit_picture(path)
    window.generate_panel.references.set_limit(3)
    assert window.pictures.edit_picture(path) and window.generate_panel.references.paths() == (path,)
    copy = next(a for a in menu.menu(path).actions() if a.text() == "Copy parameters")
    copy.trigger()
    assert "Seed: 42" in QGuiApplication.clipboard().text()
    window.pictures.show(path)
    menu.confirm = lambda p: False  # the user said no
    menu.delete(path)
    assert path.exists() and window.gallery.paths() == [path]
    menu.confirm = lambda p: True
    menu.delete(path)
    assert not path.exists() and window.gallery.paths() == [] and window.picture.view.pixmap().isNull()


def test_an_edits_result_is_shown_beside_its_original(qtbot, make_window, tmp_path: Path) -> None:
    original = _picture(tmp_path / "photo.png")
    window = make_window()
    window.generate_panel.references.set_limit(3)
    assert window.pictures.edit_picture(original)
    extra = {"References": f"{original.name}: 0123456789ab"}  # what the edit's PNG says
    edited = _picture(tmp_path / "pictures" / "edited.png", extra=extra)
    image = GeneratedImage(edited, parse_parameters(read_png_parameters(edited)), "")
    window.pictures.on_result(GenerateResult((image,), 42, 0.1, {}, 0))
    sweep = window.picture.sweep
    assert [sweep.item(i).text() for i in range(sweep.count())] == ["original", "edited"]
    assert window.picture.tabs.currentIndex() == 1 and window.picture.view.path == edited


def test_use_these_settings_fills_the_panel_and_applies_the_loras(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    window = make_window(demo_library.folder)
    _load(qtbot, window, demo_library.checkpoint)
    lora = demo_library.lora.stem
    path = _picture(
        tmp_path / "from-a1111.png", prompt="a misty harbour", seed=777, steps=13, sampler="dpmpp_2m",
        loras=(LoraUse(lora, 0.35, 0.25), LoraUse("not-in-this-library", 1.0, 1.0)),
    )  # fmt: skip
    with strict(qtbot, window.backend, "started", "stack_changed", "finished") as rec:
        window.pictures.use_settings(path)
    (info,) = rec.first("stack_changed").loras
    assert (info.path.stem, info.model_strength, info.clip_strength) == (lora, 0.35, 0.25)
    assert window.message.isVisible() and "not-in-this-library" in window.message.text.text()
    panel = window.generate_panel
    assert panel.prompt.toPlainText() == "a misty harbour" and panel.seed.text() == "777"
    assert panel.steps.value() == 13 and panel.sampler.currentData() == "dpmpp_2m"
    # again, with the LoRA on the stack at other strengths: they are set back to the picture's
    with strict(qtbot, window.backend, "started", "stack_changed", "finished"):
        window.backend.bake_strength(info.id, 1.0, 1.0)
    with strict(qtbot, window.backend, "started", "stack_changed", "finished") as rec:
        window.pictures.use_settings(path)
    assert rec.first("stack_changed").loras[0].model_strength == 0.35


def test_use_these_settings_with_no_model_loaded_offers_the_pictures_model_and_loras(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    """Issue 30: with no model loaded it said the picture's LoRA was "not in your library" (it was)
    and did not offer the picture's checkpoint (also in the library)."""
    window = make_window(demo_library.folder)
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(demo_library.lora)).isValid() and not window.backend.busy,
        timeout=30000,
    )
    path = _picture(
        tmp_path / "made-earlier.png", model=demo_library.checkpoint.stem,
        loras=(LoraUse(demo_library.lora.stem, 0.35, 0.25),),
    )  # fmt: skip
    window.pictures.use_settings(path)
    text = window.message.text.text()
    assert demo_library.checkpoint.name in text and "not in your library" not in text.lower()
    assert window.message.action.text() == "Load it"
    window.message.action.click()  # one click: the model, then its LoRA at the picture's strengths
    qtbot.waitUntil(lambda: len(window.stack.loras) == 1 and not window.backend.busy, timeout=30000)
    (info,) = window.stack.loras
    assert (info.path, info.model_strength, info.clip_strength) == (demo_library.lora, 0.35, 0.25)
    assert window.generate_panel.width() <= window.docks["generate"].width()


def test_about_names_the_installed_version() -> None:
    assert app_version() in about_text()


def test_a_gallery_thumbnail_shows_whole_with_its_name(qtbot, tmp_path: Path) -> None:
    """The strip's items are sized once, from the first item's placeholder: a placeholder smaller
    than a thumbnail cut every thumbnail to 67 px and hid its name (issue 30's screenshots)."""
    gallery = GalleryPanel()
    qtbot.addWidget(gallery)
    gallery.resize(560, 150)
    gallery.show()
    qtbot.waitExposed(gallery)
    picture = QImage(256, 256, QImage.Format.Format_RGB32)
    picture.fill(0x3366CC)
    picture.save(str(tmp_path / "00000-20261125.png"))
    gallery.add_files([(tmp_path / "00000-20261125.png", "00000-20261125")])
    qtbot.waitUntil(lambda: not gallery.loading())
    qtbot.wait(50)
    rect = gallery.strip.visualItemRect(gallery.strip.item(0))
    assert rect.height() >= THUMB + gallery.strip.fontMetrics().height(), rect
    assert gallery.strip.viewport().rect().contains(rect)
