"""The event loop keeps running while the worker loads, patches and runs: a 10 ms timer in the main
thread records the longest gap between its ticks (target < 100 ms; the test fails over 250 ms)."""

from __future__ import annotations

from app.demo import DemoLibrary
from core.session.testrun import RunConfig
from tests.app.util import StallProbe, strict

LIMIT_S = 0.25


def test_main_thread_keeps_processing_timers_while_the_worker_loads_and_patches(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window()
    backend = window.backend
    qtbot.waitExposed(window)
    qtbot.wait(300)  # the window's first paint is not the worker's doing
    probe = StallProbe(10)
    probe.start()
    window.add_folder(str(demo_library.folder))  # the scan of the demo library is measured too
    probe.phase = "scan"
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(demo_library.checkpoint)).isValid(), timeout=30000
    )
    qtbot.waitUntil(lambda: not backend.busy, timeout=30000)
    probe.phase = "load"
    for _ in range(3):
        with strict(qtbot, backend, "started", "model_loaded", "finished"):
            backend.load(demo_library.checkpoint, "checkpoint")
    probe.phase = "lora"
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        backend.add_lora(demo_library.lora, 0.8, 0.8)
    lora_id = rec.first("stack_changed").loras[0].id
    probe.phase = "slider"
    for step in range(10):  # a slider dragged across its range, then released
        with qtbot.waitSignal(backend.stack_changed, timeout=10000):
            backend.preview_strength(lora_id, -1.0 + 0.3 * step, 0.5)
        qtbot.wait(15)
    with strict(qtbot, backend, "started", "stack_changed", "finished"):
        backend.bake_strength(lora_id, 1.5, 0.5)
    probe.phase = "run"
    with strict(qtbot, backend, "started", "run_done", "finished"):
        backend.test_run(RunConfig(steps=3, width=256, height=256))
    probe.stop()
    print(f"\nevent-loop stall while the worker loaded, patched and ran: {probe.report()}")
    assert probe.ticks > 20
    assert probe.max_gap < LIMIT_S, f"the main thread stalled for {probe.max_gap * 1000:.0f} ms"


def test_main_thread_keeps_processing_timers_while_the_memory_manager_places_and_streams(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    from app.backend.placement import Placement
    from tests.app.test_placement import card

    window = make_window(demo_library.folder, placement=Placement(None, card(3)))
    backend = window.backend
    qtbot.waitUntil(lambda: not backend.busy and window.browser.select_path(demo_library.checkpoint))
    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        backend.load(demo_library.checkpoint, "checkpoint")
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        backend.add_lora(demo_library.lora, 0.8, 0.8)
    lora_id = rec.first("stack_changed").loras[0].id
    qtbot.wait(300)
    probe = StallProbe(10)
    probe.start()
    probe.phase = "place"
    with strict(qtbot, backend, "started", "models_changed", "finished"):
        backend.place("main", "diffusion_model")
    probe.phase = "slider"
    for step in range(10):  # strengths changed on the placed weights
        with qtbot.waitSignal(backend.stack_changed, timeout=10000):
            backend.preview_strength(lora_id, -1.0 + 0.3 * step, 0.5)
        qtbot.wait(15)
    probe.phase = "run"
    with strict(qtbot, backend, "started", "run_done", "finished") as rec:
        backend.test_run(RunConfig(steps=3, width=256, height=256))
    assert rec.first("run_done").streamed_bytes_per_step > 0
    probe.phase = "offload"
    with strict(qtbot, backend, "started", "models_changed", "finished"):
        backend.offload("main")
    probe.stop()
    print(f"\nevent-loop stall while the manager placed, patched, streamed: {probe.report()}")
    assert probe.ticks > 20
    assert probe.max_gap < LIMIT_S, f"the main thread stalled for {probe.max_gap * 1000:.0f} ms"


def test_main_thread_keeps_processing_timers_while_pictures_are_generated(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    """Generation with its per-step previews and the manager swapping the phases' models on a card."""
    from app.backend.placement import Placement
    from core.generate.request import ImageSettings, Sampling
    from core.queue.grid import axis_of
    from core.queue.session_grid import SessionGrid
    from tests.app.test_placement import card

    window = make_window(demo_library.folder, placement=Placement(None, card(6, 1)))
    backend = window.backend
    qtbot.waitUntil(
        lambda: window.browser.select_path(demo_library.checkpoint) and not backend.busy, timeout=30000
    )
    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        backend.load(demo_library.checkpoint, "checkpoint")
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        backend.add_lora(demo_library.lora, 0.8, 0.8)
    lora_id = rec.first("stack_changed").loras[0].id
    qtbot.wait(300)
    probe = StallProbe(10)
    probe.start()
    probe.phase = "generate"
    settings = ImageSettings("a castle", "fog", Sampling(seed=1, steps=6), 192, 192, batch=2)
    with strict(qtbot, backend, "started", "generated", "finished", timeout=120000):
        backend.generate(settings, window.generate.output_folder)
    probe.phase = "sweep"
    with strict(qtbot, backend, "started", "generated", "finished", timeout=120000):
        sweep = SessionGrid(axis_of("lora-strength", "0.3, 1.2"), lora=lora_id)
        backend.generate(settings, window.generate.output_folder, sweep)
    probe.stop()
    print(f"\nevent-loop stall while pictures were generated: {probe.report()}")
    assert probe.ticks > 20
    assert probe.max_gap < LIMIT_S, f"the main thread stalled for {probe.max_gap * 1000:.0f} ms"
