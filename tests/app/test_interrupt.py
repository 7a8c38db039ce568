"""Stop pressed mid-load (and mid-run): the flag is set at once, the task ends quickly, and the
window and engine are left exactly as before the task started."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolBar

from app.demo import DemoLibrary
from core.loading.loader import LoadedComponent, LoadOptions, load_checkpoint
from core.session import Loaders, SlotId
from tests.app.util import strict

DELAY = 0.004  # per tensor: ~1.5 s for the tiny checkpoint's 368 tensors, like a slow disk


#: progress callbacks the slow loader has seen, and whether a load ran to its end
SEEN = {"steps": 0, "finished": 0}


def _slow_checkpoint(path: Path, options: LoadOptions) -> list[LoadedComponent]:
    inner = options.progress

    def progress(p) -> None:
        time.sleep(DELAY)
        SEEN["steps"] += 1
        if inner is not None:
            inner(p)

    found = load_checkpoint(path, replace(options, progress=progress)).components
    SEEN["finished"] += 1
    return found


def _stop_button(window):
    toolbar = window.findChild(QToolBar, "toolbar")
    return toolbar.widgetForAction(window.interrupt_action)


def _press_stop_after_first_progress(qtbot, window) -> float:
    qtbot.waitSignal(window.backend.progress, timeout=20000).wait()
    assert window.interrupt_action.isEnabled(), "Stop is enabled while work runs"
    qtbot.mouseClick(_stop_button(window), Qt.MouseButton.LeftButton)
    pressed = time.perf_counter()
    assert window.backend.stop_flag.is_set(), (
        "Stop sets the flag directly, not through the busy worker's queue"
    )
    return pressed


def _diffusion_state(window) -> dict[str, torch.Tensor]:
    main = window.backend.session.loaded[SlotId.MAIN]
    module = next(c.module for c in main.components if c.role == "diffusion_model")
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_interrupt_mid_load_keeps_the_previous_model_and_a_consistent_window(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder, loaders=Loaders(checkpoint=_slow_checkpoint))
    backend = window.backend
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(demo_library.checkpoint)).isValid(), timeout=30000
    )
    qtbot.waitUntil(lambda: not backend.busy, timeout=30000)
    assert not window.interrupt_action.isEnabled()

    # the very first load, stopped: nothing is loaded, nothing half-made
    window.browser.select_path(demo_library.checkpoint)
    with strict(qtbot, backend, "started", "interrupted", "finished"):
        window.load_selected()
        pressed = _press_stop_after_first_progress(qtbot, window)
    stopped_in = time.perf_counter() - pressed
    assert backend.session.loaded == {} and window.loaded_panel.tree.topLevelItemCount() == 0
    assert window.message.isVisible() and window.message.text.text().startswith("<b>Stopped")
    assert not backend.busy and not window.interrupt_action.isEnabled()  # the flag: cleared when a job starts

    # a complete load, a LoRA, then a second load stopped half-way: the first model stays, patched
    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        window.load_selected()
    with strict(qtbot, backend, "started", "stack_changed", "finished"):
        backend.add_lora(demo_library.lora, 0.7, 0.7)
    before = _diffusion_state(window)
    with strict(qtbot, backend, "started", "interrupted", "finished"):
        window.load_selected()
        _press_stop_after_first_progress(qtbot, window)
    after = _diffusion_state(window)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert window.loaded_panel.tree.topLevelItemCount() == 1 and len(window.lora_panel.cards) == 1
    assert window.windowTitle().endswith(demo_library.checkpoint.name)
    # and the engine goes on working: the stack still changes, a new load completes
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        backend.bake_strength(next(iter(window.lora_panel.cards)), 0.2, 0.2)
    assert rec.first("stack_changed").loras[0].model_strength == 0.2
    events = [
        window.memory_panel.events.topLevelItem(i).text(1)
        for i in range(window.memory_panel.events.topLevelItemCount())
    ]
    assert sum(e.startswith("stopped load") for e in events) == 2
    print(f"\nstop pressed -> task ended in {stopped_in * 1000:.0f} ms")
    assert stopped_in < 1.0


def test_esc_stops_a_test_run(qtbot, make_window, demo_library: DemoLibrary) -> None:
    window = make_window(demo_library.folder)
    backend = window.backend
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(demo_library.checkpoint)).isValid(), timeout=30000
    )
    qtbot.waitUntil(lambda: not backend.busy, timeout=30000)
    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        backend.load(demo_library.checkpoint, "checkpoint")
    panel = window.testrun_panel
    panel.steps.setValue(200)
    panel.width_.setValue(128)
    panel.height_.setValue(128)
    window.activateWindow()
    with strict(qtbot, backend, "started", "interrupted", "finished"):
        panel.run_button.click()
        qtbot.waitSignal(backend.progress, timeout=20000).wait()
        window.interrupt_action.trigger()  # what Esc (and the Stop button) trigger
        assert backend.stop_flag.is_set()
    assert "did not finish" in panel.result.text() and panel.run_button.isEnabled()


def test_closing_the_window_mid_load_stops_the_worker(qtbot, make_window, demo_library: DemoLibrary) -> None:
    window = make_window(demo_library.folder, loaders=Loaders(checkpoint=_slow_checkpoint))
    backend = window.backend
    qtbot.waitUntil(lambda: not backend.busy and bool(window.browser.model.entries()), timeout=30000)
    backend.load(demo_library.checkpoint, "checkpoint")
    qtbot.waitSignal(backend.progress, timeout=20000).wait()
    finished = SEEN["finished"]
    window.close()
    # the load was cut short, not waited for: no later step ran and it never finished
    steps = SEEN["steps"]
    assert not backend.thread.isRunning()
    qtbot.wait(300)  # 75 more steps, had the load gone on
    assert SEEN["steps"] == steps and SEEN["finished"] == finished
