"""The Generate panel's control picture (FLUX.1 Canny/Depth, FLUX.1 control LoRAs) and the reference
box's "Keep each picture's own size", in the real window: the control picture box appears only
while the loaded model or an active control LoRA reads one (from the backend's model and stack
snapshots), says when the picture is missing -- Generate is then off, its tooltip and the status
line saying what to pick, until a picture is given or the need goes away --, shows the
preprocessor's map, goes into the settings, is kept across a relaunch and comes back from a
picture's parameters; the own-size box likewise. Screenshots at 1366x768: both rows
(``shots/app/control-picture-1366x768.png``) and the missing picture's words
(``control-picture-missing-1366x768.png``). The pictures these make are the CLI's:
``test_control_picture_window.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QScrollArea
from pytestqt.qtbot import QtBot

from app.demo import DemoLibrary
from app.gui.dock_layout import WIDE
from app.gui.generate_panel import NO_MODEL
from core.detect.spec import NO_MODEL_DEFAULTS
from core.generate.control_picture import control_parameters
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.generate.workflow_request import ControlPictureUse
from core.preprocess import preprocess
from core.session import ModelInfo
from core.session.snapshots import ComponentInfo, LoraInfo, StackInfo
from tests.app.conftest import SHOTS
from tests.fixtures.drawn import landscape


def _model(control: bool, references: int = 0) -> ModelInfo:
    """The backend's snapshot of a loaded FLUX.1 model (Canny/Depth when ``control``)."""
    name = "flux1-canny-dev.safetensors" if control else "flux1-dev.safetensors"
    net = ComponentInfo("diffusion_model", "flux-dev", "bf16", 0, "cpu")  # it generates
    return ModelInfo(
        "main", Path(name), "diffusion_model", "flux-dev", (net,), defaults=NO_MODEL_DEFAULTS,
        references=references, control_picture=control,
    )  # fmt: skip


def _lora(control: bool, enabled: bool = True, strength: float = 1.0) -> LoraInfo:
    name = "flux1-depth-dev-lora" if control else "detail"
    return LoraInfo(
        id=name, path=Path(f"{name}.safetensors"), base_family="flux-dev", model_strength=strength,
        clip_strength=1.0, enabled=enabled, matched=1, unmatched=0, skipped=0, shape_mismatches=0,
        control=control,
    )  # fmt: skip


def _blocked(panel, who: str) -> bool:  # type: ignore[no-untyped-def]
    """Generate is off, and its tooltip, the status line and the box's note say what to pick."""
    words = f"{who} needs a control picture: pick an edge or depth map, or a photo and a preprocessor"
    texts = (panel.generate_button.toolTip(), panel.status.text(), panel.control_picture.note.text())
    return not panel.generate_button.isEnabled() and all(t.startswith(words) for t in texts)


def _open(panel) -> bool:  # type: ignore[no-untyped-def]
    button = panel.generate_button
    return button.isEnabled() and button.toolTip() == "Generate (Ctrl+Enter)" and panel.gate.open


def _reparsed(extra: dict[str, str]) -> GenerationParameters:
    return parse_parameters(format_parameters(GenerationParameters("a house", extra=extra)))


def test_the_box_shows_for_a_control_model_or_lora_warns_and_goes_into_the_settings(
    make_window, qtbot: QtBot, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    window = make_window(tmp_path)
    panel, backend = window.generate_panel, window.backend
    box = panel.control_picture
    panel.prompt.setPlainText("a house")
    assert not box.isVisible() and panel.settings().control_picture is None
    backend.models_changed.emit((_model(control=True),))
    assert box.isVisible() and _blocked(panel, "The loaded model")
    assert panel.settings().control_picture is None  # the engine would say so in words
    with qtbot.assertNotEmitted(panel.generate_requested):  # Ctrl+Enter does nothing either
        qtbot.keyClick(panel.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    photo = landscape(tmp_path / "house.png", 96, 64)
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(photo))])
    drop = QDropEvent(
        QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    )
    box.dropEvent(drop)  # a picture dropped on the box
    assert box.picture.path == photo
    assert _open(panel) and panel.status.text() == "Ready: Ctrl+Enter generates."
    box.pre.set_name("canny")
    assert box.pre.preview_button.isEnabled() and not box.pre.thumb.pixmap().isNull()
    full = np.asarray(Image.open(photo).convert("RGB"))
    assert box.pre.map is not None and np.array_equal(box.pre.map, preprocess("canny", full))
    assert "follows the canny map of this picture" in box.note.text()
    assert panel.settings().control_picture == ControlPictureUse(photo, "canny")
    box.picture.set_path(None)  # cleared (×): off again, and back on when the model changes
    assert _blocked(panel, "The loaded model")
    backend.models_changed.emit((_model(control=False),))  # FLUX.1 [dev]: takes none
    assert not box.isVisible() and panel.settings().control_picture is None and _open(panel)
    backend.stack_changed.emit(StackInfo("flux-dev", (_lora(False), _lora(True))))
    assert box.isVisible() and _blocked(panel, "The control LoRA flux1-depth-dev-lora")
    box.picture.set_path(photo)
    assert "control LoRA flux1-depth-dev-lora follows" in box.note.text() and _open(panel)
    assert panel.settings().control_picture == ControlPictureUse(photo, "canny")
    box.picture.set_path(None)
    for off in (_lora(True, enabled=False), _lora(True, strength=0.0)):  # the engine's rule
        backend.stack_changed.emit(StackInfo("flux-dev", (off,)))
        assert not box.isVisible() and panel.settings().control_picture is None and _open(panel)
    backend.models_changed.emit(())  # no model: its own words, not the control picture's
    assert not panel.generate_button.isEnabled() and panel.generate_button.toolTip() == NO_MODEL


def test_the_picture_and_own_size_are_kept_and_read_back(make_window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    photo, other = landscape(tmp_path / "house.png", 64, 64), landscape(tmp_path / "edges.png", 64, 48)
    window = make_window(tmp_path)
    panel = window.generate_panel
    window.backend.models_changed.emit((_model(control=True, references=3),))
    panel.control_picture.picture.set_path(photo)
    panel.control_picture.pre.set_name("depth")
    refs = panel.references
    refs.slots[0].set_path(other)
    assert panel.settings().reference_own_size is False
    refs.own_size.setChecked(True)
    assert panel.settings().reference_own_size is True and panel.settings().references == (other,)
    window.close()  # the fields go to the settings store
    panel = make_window(tmp_path).generate_panel
    box, refs = panel.control_picture, panel.references
    assert (box.picture.path, box.pre.name) == (photo, "depth") and refs.own_size.isChecked()

    # a picture's parameters: the preprocessor, the own size, and the file from the folder it was in
    box.picture.set_path(other)
    box.pre.set_name(None)
    refs.own_size.setChecked(False)
    extra = {**control_parameters("house.png [0123456789ab]", "canny"), "References": "edges.png: 01234567"}
    panel.apply_parameters(_reparsed({**extra, "Reference size": "own"}))
    assert (box.picture.path, box.pre.name) == (photo, "canny") and refs.own_size.isChecked()
    panel.apply_parameters(_reparsed({"References": "edges.png: 0123456789ab"}))  # scaled as usual
    assert not refs.own_size.isChecked()
    box.picture.set_path(None)
    panel.apply_parameters(_reparsed(control_parameters("gone.png [0123456789ab]", None)))
    assert box.picture.path is None and box.pre.name is None
    assert "followed the control picture gone.png: pick it here" in box.note.text()
    # hostile text naming a path: never looked up outside the folders pictures were chosen from
    (tmp_path / "inner").mkdir()
    box.folders = [tmp_path / "inner"]
    for name in ("../house.png", str(photo)):
        panel.apply_parameters(_reparsed(control_parameters(f"{name} [0123456789ab]", None)))
        assert box.picture.path is None and f"control picture {name}: pick it here" in box.note.text()


def test_screenshot_of_the_control_picture_and_reference_rows_at_1366x768(
    qtbot: QtBot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    window = make_window(demo_library.folder)
    window.resize(1366, 768)
    window.show()
    panel = window.generate_panel
    window.backend.models_changed.emit((_model(control=True, references=3),))
    qtbot.wait(50)  # Generate off, the status line saying what to pick: read whole at this size
    status = panel.status
    assert not panel.generate_button.isEnabled() and not status.visibleRegion().isEmpty()
    lines = status.fontMetrics().boundingRect(status.contentsRect(), Qt.TextFlag.TextWordWrap, status.text())
    assert lines.height() <= status.contentsRect().height(), "the status line cuts the words"
    SHOTS.mkdir(parents=True, exist_ok=True)
    blocked = SHOTS / "control-picture-missing-1366x768.png"
    assert window.grab().save(str(blocked)) and blocked.stat().st_size > 5000
    photo = landscape(tmp_path / "house.png", 384, 256)
    panel.references.slots[0].set_path(photo)
    panel.references.own_size.setChecked(True)
    panel.control_picture.picture.set_path(photo)
    panel.control_picture.pre.set_name("canny")
    qtbot.wait(50)
    scroller = panel.control_picture.parentWidget()
    while scroller is not None and not isinstance(scroller, QScrollArea):
        scroller = scroller.parentWidget()
    assert scroller is not None
    scroller.ensureWidgetVisible(panel.control_picture.note, 0, 0)
    qtbot.wait(50)
    for shown in (panel.control_picture.pre.thumb, panel.control_picture.note, panel.references.own_size):
        assert not shown.visibleRegion().isEmpty()
    assert panel.references.own_size.width() >= panel.references.own_size.sizeHint().width()  # not cut
    assert panel.minimumSizeHint().width() <= WIDE["generate"]  # the Generate column stays narrow
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / "control-picture-1366x768.png"
    assert window.grab().save(str(shot)) and shot.stat().st_size > 5000
    assert (window.width(), window.height()) == (1366, 768)
