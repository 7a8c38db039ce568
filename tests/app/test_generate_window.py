"""Generating from the real window: type a prompt, generate on the demo model, see the picture and its
parameters; on a simulated card the manager places each phase; a picture dropped in fills the fields."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.backend.placement import Placement
from app.demo import DemoLibrary
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.session import SlotId
from tests.app.test_placement import card
from tests.app.util import strict


def _load(qtbot, window, path: Path) -> None:
    qtbot.waitUntil(lambda: window.browser.select_path(path) and not window.backend.busy, timeout=30000)
    with strict(qtbot, window.backend, "started", "model_loaded", "finished"):
        window.load_entry(window.browser.current_entry())


def test_type_a_prompt_generate_and_see_the_picture_with_its_parameters(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    window = make_window(demo_library.folder)
    panel = window.generate_panel
    assert not panel.generate_button.isEnabled()  # nothing loaded yet
    _load(qtbot, window, demo_library.checkpoint)
    qtbot.waitUntil(lambda: panel.generate_button.isEnabled(), timeout=5000)
    assert "noise-like" in panel.status.text()  # the demo says its pictures are noise
    panel.prompt.setPlainText("")
    qtbot.keyClicks(panel.prompt, "a red fox in the snow")
    panel.negative.setPlainText("blurry")
    panel.seed.setText("1234")
    panel.steps.setValue(3)
    panel.size.setCurrentIndex(panel.size.count() - 1)  # custom
    panel.width_.setValue(64)
    panel.height_.setValue(96)
    previews: list = []
    window.backend.generate_progress.connect(
        lambda p: previews.append(p.preview) if p.preview is not None else None
    )
    with strict(qtbot, window.backend, "started", "generated", "finished", timeout=120000) as rec:
        qtbot.keyClick(panel.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    result = rec.first("generated")
    assert len(previews) == 3 and previews[0].shape == (12, 8, 3)  # a live preview each step
    (image,) = result.images
    assert image.path.parent.parent == tmp_path / "pictures" and image.path.name.endswith("-1234.png")
    p = parse_parameters(read_png_parameters(image.path))
    assert (p.prompt, p.negative, p.seed, p.steps, p.width, p.height) == (
        "a red fox in the snow",
        "blurry",
        1234,
        3,
        64,
        96,
    )
    assert window.gallery.paths() == [image.path] and "Seed: 1234" in window.picture.infotext
    assert window.picture.view.pixmap().size().width() == 64 and panel.generate_button.isEnabled()
    panel.seed.setText("1")
    panel.reuse_seed()
    assert panel.seed.text() == "1234"


def test_on_a_simulated_card_each_phase_is_placed_with_its_reasons(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder, placement=Placement(None, card(6, 1)))
    _load(qtbot, window, demo_library.checkpoint)
    panel = window.generate_panel
    qtbot.waitUntil(lambda: panel.generate_button.isEnabled(), timeout=5000)
    panel.prompt.setPlainText("lighthouse")
    panel.steps.setValue(2)
    panel.size.setCurrentIndex(panel.size.count() - 1)
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    events: list = []
    window.backend.event.connect(events.append)
    with strict(qtbot, window.backend, "started", "generated", "finished", timeout=120000) as rec:
        panel.generate_button.click()
    result = rec.first("generated")
    roles = {e["role"] for e in result.events}
    assert {"text_encoder", "diffusion_model", "vae"} <= roles
    assert any(e.kind in ("evict", "partial_unload", "unload") for e in events)  # swaps made room
    main = next(m for m in window.models if m.key == SlotId.MAIN.key)
    assert any(c.placed for c in main.components)  # the loaded panel shows where things ended up


def test_a_picture_dropped_on_the_panel_fills_the_fields(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    window = make_window(demo_library.folder)
    _load(qtbot, window, demo_library.checkpoint)
    panel = window.generate_panel
    panel.prompt.setPlainText("castle at night")
    panel.seed.setText("77")
    panel.steps.setValue(2)
    panel.size.setCurrentIndex(panel.size.count() - 1)
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    with strict(qtbot, window.backend, "started", "generated", "finished", timeout=120000) as rec:
        panel.generate_button.click()
    path = rec.first("generated").images[0].path
    panel.prompt.setPlainText("something else")
    panel.seed.setText("5")
    panel.read_picture(path)
    assert panel.prompt.toPlainText() == "castle at night" and panel.seed.text() == "77"


def test_a_lora_strength_sweep_from_the_panel_shows_each_cell_and_the_grid(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder)
    _load(qtbot, window, demo_library.checkpoint)
    with strict(qtbot, window.backend, "started", "stack_changed", "finished"):
        window.backend.add_lora(demo_library.lora, 0.8, 0.8)
    panel = window.generate_panel
    assert panel.sweep_lora.count() == 5  # off, the demo LoRA, the first ControlNet, the IP-Adapter, Redux
    panel.sweep_lora.setCurrentIndex(1)
    panel.sweep_values.setText("0, 1.2")
    panel.prompt.setPlainText("a fox")
    panel.steps.setValue(2)
    panel.size.setCurrentIndex(panel.size.count() - 1)
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    with strict(qtbot, window.backend, "started", "generated", "finished", timeout=120000) as rec:
        panel.generate_button.click()
    images = rec.first("generated").images
    labels = [i.label for i in images]
    assert [i.role for i in images] == ["grid", "cell", "cell"]  # the grid's axis made in place
    assert labels[1:] == [f"{demo_library.lora.stem} 0", f"{demo_library.lora.stem} 1.2"]
    assert len(window.gallery.paths()) == 3
    grid = window.picture.sweep  # the cells as a readable grid, labelled, each viewable
    assert grid.count() == 2 and grid.item(1).text() == labels[2] and window.picture.tabs.currentIndex() == 1
    assert grid.iconSize().width() >= 128  # 64 px cells enlarged to a readable size
    grid.itemDoubleClicked.emit(grid.item(1))
    assert window.picture.view.path == rec.first("generated").images[2].path
    qtbot.waitUntil(lambda: window.stack.loras and window.stack.loras[0].model_strength == 0.8, timeout=5000)


def test_a_picture_dropped_anywhere_on_the_window_fills_the_generate_panel(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    import numpy as np
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    from core.generate.parameters import GenerationParameters, format_parameters
    from core.generate.png import save_png

    window = make_window(demo_library.folder)
    params = GenerationParameters(prompt="a quiet street", seed=99, steps=14)
    path = save_png(tmp_path / "from-a1111.png", np.zeros((8, 8, 3), np.uint8), format_parameters(params))
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(
        QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    )
    window.dropEvent(event)
    panel = window.generate_panel
    assert (panel.prompt.toPlainText(), panel.seed.text(), panel.steps.value()) == (
        "a quiet street",
        "99",
        14,
    )


def test_a_controlnet_and_a_painted_mask_from_the_workflow_box_on_a_simulated_card(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    import numpy as np
    from PIL import Image

    from tests.fixtures.controlnets import hint_picture, mask_picture, tiny_controlnet_file

    window = make_window(demo_library.folder, placement=Placement(None, card(6, 1)))
    _load(qtbot, window, demo_library.checkpoint)
    panel = window.generate_panel
    qtbot.waitUntil(lambda: panel.generate_button.isEnabled(), timeout=5000)
    panel.prompt.setPlainText("lighthouse")
    panel.steps.setValue(2)
    panel.size.setCurrentIndex(panel.size.count() - 1)
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    init = tmp_path / "init.png"
    Image.fromarray(np.full((64, 64, 3), 150, np.uint8)).save(init)
    box = panel.workflows
    box.setChecked(True)
    box.controlnet.set_path(tiny_controlnet_file(tmp_path / "cn.safetensors"))
    button = panel.generate_button  # a net without its hint: Generate is off and says why
    words = "ControlNet 0 (cn) needs a hint picture: "
    words += "pick one (or a photo and a preprocessor), or choose none."
    assert not button.isEnabled() and button.toolTip() == words == panel.status.text()
    box.hint.set_path(hint_picture(tmp_path / "hint.png"))
    assert button.isEnabled() and panel.status.text() == "Ready: Ctrl+Enter generates."
    box.mask.set_path(mask_picture(tmp_path / "mask.png"))  # a mask before its picture
    assert not button.isEnabled() and button.toolTip().startswith("The mask needs a picture to start from")
    box.init.set_path(init)
    assert button.isEnabled()
    box.denoise.setValue(0.8)
    with strict(qtbot, window.backend, "started", "generated", "finished", timeout=120000) as rec:
        panel.generate_button.click()
    result = rec.first("generated")
    assert "controlnet" in {e["role"] for e in result.events}  # the manager placed it
    p = parse_parameters(read_png_parameters(result.images[0].path))
    assert p.denoise == 0.8 and p.extra["ControlNet 0"].startswith("Module: none, Model: cn")
