"""The real window driven like a user: load a tiny real model, stack LoRAs, move sliders, run, unload."""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QDropEvent

from app.demo import DemoLibrary
from app.gui.settings import AppSettings
from tests.app.util import strict


def _ready(qtbot, window, path) -> None:
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(path)).isValid() and not window.backend.busy, timeout=30000
    )


def test_load_lora_sliders_run_and_unload_through_the_window(
    qtbot, make_window, demo_library: DemoLibrary, store
) -> None:
    window = make_window(demo_library.folder)
    backend = window.backend
    _ready(qtbot, window, demo_library.checkpoint)
    b = window.browser

    # double-click the checkpoint in the tree
    index = b.model.index_of(str(demo_library.checkpoint))
    b.tree.scrollTo(index)
    center = b.tree.visualRect(index).center()
    qtbot.mouseClick(
        b.tree.viewport(), Qt.MouseButton.LeftButton, pos=center
    )  # a double-click starts with a press
    assert window.details.entry is not None and window.details.entry.path == demo_library.checkpoint
    with strict(qtbot, backend, "started", "model_loaded", "models_changed", "stack_changed", "finished"):
        qtbot.mouseDClick(b.tree.viewport(), Qt.MouseButton.LeftButton, pos=center)
    top = window.loaded_panel.tree.topLevelItem(0)
    assert window.loaded_panel.tree.topLevelItemCount() == 1 and top.text(0) == demo_library.checkpoint.name
    parts = {top.child(i).text(0): [top.child(i).text(c) for c in (1, 3)] for i in range(top.childCount())}
    assert parts == {
        "diffusion model · sd1": ["fp16", "RAM"],
        "text encoder · clip-l": ["fp16", "RAM"],
        "vae · vae-sd": ["fp16", "RAM"],
    }
    assert window.windowTitle() == demo_library.checkpoint.name  # Qt adds " — Loadout" once
    assert window.testrun_panel.run_button.isEnabled()

    # add the demo LoRA with the details pane's button
    assert b.select_path(demo_library.lora) and window.details.lora_button.isEnabled()
    with strict(qtbot, backend, "started", "stack_changed", "models_changed", "finished"):
        qtbot.mouseClick(window.details.lora_button, Qt.MouseButton.LeftButton)
    (card,) = window.lora_panel.cards.values()
    assert card.counts.text().startswith("40 modules matched · 0 unmatched") and card.warning.isHidden()
    top = window.loaded_panel.tree.topLevelItem(0)
    patched = {top.child(i).text(0): top.child(i).text(4) for i in range(top.childCount())}
    assert patched["diffusion model · sd1"] == "32" and patched["text encoder · clip-l"] == "8"

    # drag the model slider: live preview while it moves, baked when released
    slider = card.model.slider
    slider.setSliderDown(True)
    with qtbot.waitSignal(backend.stack_changed) as moving:
        slider.setValue(-50)
    assert moving.args[0].baked is False and moving.args[0].loras[0].model_strength == -0.5
    assert card.model.spin.value() == -0.5
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        slider.setSliderDown(False)  # released
    assert rec.first("stack_changed").baked is True
    # type a text-encoder strength
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        card.clip.spin.setValue(1.25)
    lora = rec.first("stack_changed").loras[0]
    assert (lora.model_strength, lora.clip_strength) == (-0.5, 1.25)
    assert (
        backend.session.loras.stack is not None
        and backend.session.loras.stack.entries[lora.id].clip_strength == 1.25
    )
    # a wider range, negatives included, kept in the settings
    window.lora_panel.lo_spin.setValue(-3.0)
    assert card.model.slider.minimum() == -300 and AppSettings.load(store).lora_min == -3.0
    # toggle it off and on
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        card.enabled.setChecked(False)
    assert rec.first("stack_changed").loras[0].enabled is False

    # a LoRA for another model: plain words, and "Add anyway" adds what fits, with a warning
    sdxl_lora = demo_library.folder / "models/loras/demo-detail-tweaker-sdxl.safetensors"
    with strict(qtbot, backend, "started", "failed", "finished"):
        window.add_lora(sdxl_lora)
    assert window.message.isVisible() and "another model" in window.message.text.text()
    assert window.message.action.isVisible() and window.message.action.text() == "Add anyway"
    with strict(qtbot, backend, "started", "stack_changed", "finished"):
        qtbot.mouseClick(window.message.action, Qt.MouseButton.LeftButton)
    assert len(window.lora_panel.cards) == 2
    second = window.lora_panel.cards["demo-detail-tweaker-sdxl"]
    assert not second.warning.isHidden() and "made for sdxl" in second.warning.text()

    # reorder and remove with the card buttons
    with strict(qtbot, backend, "started", "stack_changed", "finished"):
        window.lora_panel.move(lora.id, 1)
    assert list(window.lora_panel.cards) == ["demo-detail-tweaker-sdxl", lora.id]
    with strict(qtbot, backend, "started", "stack_changed", "models_changed", "finished"):
        backend.remove_lora("demo-detail-tweaker-sdxl")
    assert list(window.lora_panel.cards) == [lora.id]

    # a LoRA dropped from the browser onto the panel
    assert b.fits.isChecked() and not b.model.index_of(str(sdxl_lora)).isValid()  # hidden: for SDXL
    b.fits.setChecked(False)
    mime = b.model.mimeData([b.model.index_of(str(sdxl_lora))])
    drop = QDropEvent(
        QPointF(20, 20),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    with strict(qtbot, backend, "started", "failed", "finished"):
        window.lora_panel.dropEvent(drop)

    # a short test run
    panel = window.testrun_panel
    panel.steps.setValue(2)
    panel.width_.setValue(64)
    panel.height_.setValue(64)
    with strict(qtbot, backend, "started", "run_done", "finished"):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert "s/step" in panel.result.text() and panel.history.topLevelItemCount() == 1

    # unload
    with strict(qtbot, backend, "started", "models_changed", "stack_changed", "finished"):
        qtbot.mouseClick(window.loaded_panel.unload_button, Qt.MouseButton.LeftButton)
    assert window.loaded_panel.tree.topLevelItemCount() == 0 and not window.lora_panel.cards
    assert window.windowTitle() == "Loadout" and not panel.run_button.isEnabled()
    events = [
        window.memory_panel.events.topLevelItem(i).text(1)
        for i in range(window.memory_panel.events.topLevelItemCount())
    ]
    assert events[0].startswith("unload") and any(e.startswith("load") for e in events)
    assert 1 <= len(window.memory_panel.plot.markers) <= len(events)  # events of one draw share a marker


def test_bad_files_are_reported_in_plain_words_and_the_app_lives_on(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder)
    damaged = demo_library.folder / "models/checkpoints/damaged-download.safetensors"
    _ready(qtbot, window, damaged)
    window.browser.select_path(damaged)
    window.load_selected()  # Ctrl+L on an unreadable file
    assert window.message.isVisible() and window.message.text.text().startswith("<b>Damaged")
    sparse = demo_library.folder / "models/checkpoints/SDXL/sdxl-base-demo.safetensors"
    window.browser.select_path(sparse)
    window.load_selected()
    assert "no weights" in window.message.text.text() and not backend_busy(window)
    window.add_lora(demo_library.lora)  # nothing loaded
    assert "Load a checkpoint first" in window.message.text.text()
    with strict(qtbot, window.backend, "started", "failed", "finished"):
        window.backend.load(damaged, "checkpoint")  # straight to the engine: still no crash
    assert window.message.level == "error"


def backend_busy(window) -> bool:
    return bool(window.backend.busy)
