"""The memory manager in the app: placing, partial loads, LoRAs on placed weights, offloading, the
test run's streaming, and the events the window shows. No GPU is needed: a simulated card makes the
manager plan, evict and stream for real on the CPU (the same code path as on a GPU, device "cpu")."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.backend.placement import Placement, PlacementConfig
from app.demo import DemoLibrary
from app.gui.settings import AppSettings
from core.errors import LoadoutError
from core.memory.policy import MemorySettings, VramState
from core.session import Session, SlotId
from core.session.testrun import RunConfig
from tests.app.util import strict

MIB = 2**20
NORMAL = MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0)
RUN = RunConfig(steps=2, width=64, height=64, seed=7)


def card(mib: float, inference_mib: float = 1.0) -> PlacementConfig:
    return PlacementConfig(NORMAL, simulate_bytes=int(mib * MIB), inference_bytes=int(inference_mib * MIB))


def _engine(lib: DemoLibrary, placement: Placement | None) -> Session:
    engine = Session(placement)
    engine.load(lib.checkpoint, "checkpoint", lambda p: None, lambda: None)
    return engine


def _output(engine: Session) -> dict[str, object]:
    return engine.test_run(RUN, lambda s: None, lambda: None).output


def test_no_gpu_and_no_simulation_means_cpu_and_a_clear_refusal(demo_library: DemoLibrary) -> None:
    engine = _engine(demo_library, Placement(None))
    info = engine.placement.describe()
    assert not info.active and "no GPU was found" in info.reason
    with pytest.raises(LoadoutError) as exc:
        engine.place(SlotId.MAIN)
    assert exc.value.code == "no_device" and "simulated card" in exc.value.message
    report = engine.test_run(RUN, lambda s: None, lambda: None)
    assert report.placement == "" and report.streamed_bytes_per_step == 0


def test_placed_partly_streamed_and_changed_loras_match_the_cpu_bake(demo_library: DemoLibrary) -> None:
    cpu = _engine(demo_library, Placement(None))
    sim = _engine(demo_library, Placement(None, card(3)))
    events: list = []
    sim.on_event = events.append
    for e in (cpu, sim):
        e.loras.add(demo_library.lora, 0.8, 0.6, False)
    stack_info = sim.loras.info()
    assert stack_info.applied.startswith("recorded")  # nothing placed yet: nothing computed

    models = sim.place(SlotId.MAIN, "diffusion_model")
    diffusion = next(c for c in models[0].components if c.role == "diffusion_model")
    assert diffusion.placed and 0 < diffusion.device_bytes < diffusion.bytes
    assert diffusion.device_bytes + diffusion.streamed_bytes == diffusion.bytes
    assert not next(c for c in models[0].components if c.role == "vae").placed
    assert sim.loras.info().applied.startswith("applied on Simulated 3 MiB GPU")
    assert [e.kind for e in events if e.kind in ("partial_load", "load")][-1] == "partial_load"

    report = sim.test_run(RUN, lambda s: None, lambda: None)
    assert report.output == _output(cpu)  # bit-identical: same math, wherever the weights live
    assert report.streamed_bytes_per_step > 0 and report.resident_bytes == diffusion.device_bytes
    assert report.placement == "Simulated 3 MiB GPU (on the CPU)" and report.peak_vram

    lora_id = next(iter(sim.loras.stack.entries))
    for strength in (-0.4, 1.3):  # a slider moved while the model is placed
        info = sim.loras.set_strength(lora_id, strength, None, bake=False)
        assert info.baked and info.recomputed_keys > 0  # resident weights recomputed on the device
        cpu.loras.set_strength(lora_id, strength, None, bake=True)
        assert _output(sim) == _output(cpu)
    sim.loras.set_enabled(lora_id, False)
    cpu.loras.set_enabled(lora_id, False)
    assert _output(sim) == _output(cpu)

    models = sim.offload(SlotId.MAIN)
    assert not any(c.placed for c in models[0].components)
    assert events[-1].kind == "unload" and "you offloaded it" in events[-1].reason
    assert _output(sim) == _output(cpu)  # placed again by the run, with the stack


def test_switching_the_simulated_card_on_and_off_keeps_the_weights_right(demo_library: DemoLibrary) -> None:
    cpu = _engine(demo_library, Placement(None))
    engine = _engine(demo_library, Placement(None))
    for e in (cpu, engine):
        e.loras.add(demo_library.lora, 0.7, 0.5, False)
    expected = _output(cpu)
    info = engine.configure(card(256, 2))
    assert info.active and info.simulated and info.label == "Simulated 256 MiB GPU (on the CPU)"
    engine.place(SlotId.MAIN)
    assert _output(engine) == expected  # the stack is applied once, on the device copies
    info = engine.configure(PlacementConfig())
    assert not info.active and not any(c.placed for m in engine.models() for c in m.components)
    assert _output(engine) == expected  # baked on the CPU again


def test_unloading_a_placed_model_releases_it_from_the_manager(demo_library: DemoLibrary) -> None:
    engine = _engine(demo_library, Placement(None, card(256, 2)))
    engine.place(SlotId.MAIN)
    assert engine.placement.placed_bytes() > 0
    engine.unload(SlotId.MAIN)
    assert engine.placement.placed_bytes() == 0 and engine.placement.manager.loaded() == []


def test_the_window_places_offloads_and_shows_the_managers_reasons(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder, placement=Placement(None, card(3)))
    backend = window.backend
    qtbot.waitUntil(lambda: window.browser.select_path(demo_library.checkpoint) and not backend.busy)
    assert window.memory_panel.note.text().startswith("Simulated 3 MiB GPU (on the CPU)")
    assert "gpu_used" in window.memory_panel.plot.curves
    with strict(qtbot, backend, "started", "model_loaded", "models_changed", "stack_changed", "finished"):
        window.load_selected()
    panel = window.loaded_panel
    top = panel.tree.topLevelItem(0)
    diffusion = next(top.child(i) for i in range(top.childCount()) if top.child(i).text(0).startswith("diff"))
    panel.tree.setCurrentItem(diffusion)
    assert panel.gpu_button.isEnabled() and not panel.offload_button.isEnabled()

    with strict(qtbot, backend, "started", "event", "models_changed", "stack_changed", "finished") as rec:
        qtbot.mouseClick(panel.gpu_button, Qt.MouseButton.LeftButton)
    assert rec.first("event").kind == "partial_load"
    top = panel.tree.topLevelItem(0)
    on = {top.child(i).text(0): top.child(i).text(3) for i in range(top.childCount())}
    assert on["diffusion model · sd1"].startswith("GPU ") and on["diffusion model · sd1"].endswith("%")
    assert on["vae · vae-sd"] == "RAM" and "streams from RAM" in panel.summary.text()
    assert panel.tree.currentItem().text(0) == "diffusion model · sd1"  # the selection survived
    assert panel.offload_button.isEnabled()
    listed = window.memory_panel.events.topLevelItem(0).text(1)
    assert listed.startswith("partly placed loadout-demo-sd15-tiny diffusion model")
    assert "to stream at each step" in listed
    assert any("partial" in m[1].label.textItem.toPlainText() for m in window.memory_panel.plot.markers)

    with strict(qtbot, backend, "started", "run_done", "models_changed", "finished") as rec:
        window.testrun_panel.steps.setValue(2)
        window.testrun_panel.width_.setValue(64)
        window.testrun_panel.height_.setValue(64)
        qtbot.mouseClick(window.testrun_panel.run_button, Qt.MouseButton.LeftButton)
    assert rec.first("run_done").streamed_bytes_per_step > 0
    assert "streamed per step" in window.testrun_panel.result.text()

    with strict(qtbot, backend, "started", "event", "models_changed", "stack_changed", "finished") as rec:
        qtbot.mouseClick(panel.offload_button, Qt.MouseButton.LeftButton)
    assert rec.first("event").kind == "unload"
    top = panel.tree.topLevelItem(0)
    assert {top.child(i).text(3) for i in range(top.childCount())} == {"RAM"}


def test_memory_settings_switch_the_device_live(qtbot, make_window, demo_library: DemoLibrary) -> None:
    window = make_window(demo_library.folder)
    qtbot.waitUntil(lambda: not window.backend.busy)
    assert "No GPU found" in window.memory_panel.note.text()
    assert not window.loaded_panel.gpu_button.isEnabled()
    from dataclasses import replace

    with strict(qtbot, window.backend, "started", "event", "placement_changed", "finished"):
        window.apply_settings(replace(window.settings, simulate_vram_mib=512))
    assert window.placement.active and window.memory_panel.note.text().startswith("Simulated 512 MiB GPU")
    assert window.monitor.gpu is not None and window.monitor.gpu.total() == 512 * MIB  # its own probe
    assert set(window.memory_panel.plot.curves) == {"ram_used", "rss", "gpu_used"}
    assert window.details.fit.headroom is not None
    assert AppSettings.load(window.store).simulate_vram_mib == 512  # persisted
    qtbot.waitUntil(lambda: not window.backend.busy)


def test_a_stop_during_placement_leaves_every_model_where_it_was(demo_library: DemoLibrary) -> None:
    from core.errors import InterruptedByUser

    engine = _engine(demo_library, Placement(None, card(3)))
    events: list = []
    engine.on_event = events.append
    engine.interrupt.set()  # Stop pressed as the placement starts
    with pytest.raises(InterruptedByUser):
        engine.place(SlotId.MAIN)
    assert not any(c.placed for c in engine.models()[0].components)
    assert engine.placement.manager.loaded() == [] and events[-1].kind == "interrupt"
    engine.place(SlotId.MAIN, "diffusion_model")  # the flag was consumed: the next request runs
    assert engine.placement.placed_bytes() > 0


@pytest.mark.gpu
def test_on_a_real_gpu_placed_and_streamed_runs_match_the_cpu(demo_library: DemoLibrary) -> None:
    """Run with ``pytest -m gpu`` on a machine with CUDA: the whole card, then a card capped so the
    diffusion model streams; both match the CPU bake within float tolerance."""
    cpu = _engine(demo_library, Placement(None))
    cpu.loras.add(demo_library.lora, 0.8, 0.6, False)
    expected = _output(cpu)
    for limit in (0, 3 * MIB):
        gpu = _engine(demo_library, Placement.discover(PlacementConfig(NORMAL, limit, MIB)))
        assert gpu.placement.active and gpu.placement.target == "cuda:0"
        gpu.loras.add(demo_library.lora, 0.8, 0.6, False)
        gpu.place(SlotId.MAIN, "diffusion_model")
        report = gpu.test_run(RUN, lambda s: None, lambda: None)
        assert report.device.startswith("cuda") and report.peak_vram
        assert (report.streamed_bytes_per_step > 0) == (limit > 0)
        out = report.output
        assert out["shape"] == expected["shape"]
        assert abs(out["sum"] - expected["sum"]) <= 1e-3 * max(1.0, abs(expected["abs_sum"]))  # type: ignore[operator]


def test_placing_one_component_evicts_others_and_says_why(demo_library: DemoLibrary) -> None:
    engine = _engine(demo_library, Placement(None, card(80, 2)))
    events: list = []
    engine.on_event = events.append
    engine.place(SlotId.MAIN, "diffusion_model")
    engine.place(SlotId.MAIN, "vae")
    engine.place(
        SlotId.MAIN, "text_encoder"
    )  # 86 MiB (its 49,408-token table) on 80 MiB: the others make room
    where = {c.role: (c.placed, c.streamed_bytes > 0) for c in engine.models()[0].components}
    assert where == {"diffusion_model": (False, False), "vae": (False, False), "text_encoder": (True, True)}
    evictions = [e for e in events if e.reason.startswith("Evicted")]
    assert len(evictions) == 2 and all("to make room for" in e.reason for e in evictions)
    assert events[-1].kind == "partial_load"
    cpu = _engine(demo_library, Placement(None))
    assert _output(engine) == _output(cpu)  # the test run places the diffusion model back


def test_reloading_and_unloading_keep_the_managers_books_clean(demo_library: DemoLibrary) -> None:
    import gc
    import weakref

    engine = _engine(demo_library, Placement(None, card(256, 2)))
    engine.place(SlotId.MAIN)
    engine.load(demo_library.checkpoint, "checkpoint", lambda p: None, lambda: None)  # replaced
    names = sorted(e.name for e in engine.placement.manager._alive())
    assert names == sorted(
        f"loadout-demo-sd15-tiny {w}" for w in ("diffusion model", "text encoder clip-l", "VAE")
    )  # no "(2)": the replaced model left the manager
    engine.place(SlotId.MAIN)
    engine.interrupt.set()  # a Stop pressed meanwhile never stops an unload
    engine.unload(SlotId.MAIN)
    assert engine.loaded == {} and engine.placement.manager.loaded() == []
    engine.interrupt.clear()

    engine.load(demo_library.checkpoint, "checkpoint", lambda p: None, lambda: None)
    engine.place(SlotId.MAIN)
    engine.configure(PlacementConfig())  # card off, then the model goes
    module = weakref.ref(engine.loaded[SlotId.MAIN].components[0].module)
    engine.unload(SlotId.MAIN)
    gc.collect()
    assert module() is None and engine.placement.mover._placed == {}


def test_a_checkpoints_components_share_one_streaming_region(demo_library: DemoLibrary) -> None:
    """On a 5 MiB card the three components placed in turn left the text encoder no room to stream
    (the diffusion model took it); they run one at a time, so they share one in-flight region and
    all three are placed."""
    engine = _engine(demo_library, Placement(None, card(5)))
    engine.place(SlotId.MAIN)
    placed = {c.role: c.placed for c in engine.models()[0].components}
    assert placed == {"diffusion_model": True, "text_encoder": True, "vae": True}


def test_a_component_that_cannot_be_placed_is_named_with_what_was_placed(demo_library: DemoLibrary) -> None:
    engine = _engine(demo_library, Placement(None, card(3)))
    with pytest.raises(LoadoutError) as exc:
        # the 86 MiB text encoder cannot even stream on a 3 MiB card (1 MiB kept for activations;
        # its two largest modules in flight need 2.3 MiB)
        engine.place(SlotId.MAIN)
    message = exc.value.message
    assert exc.value.code == "out_of_memory"
    assert "(diffusion model, VAE placed)" in message and "text encoder clip-l" in message
    assert "place the components one by one" in message
    placed = {c.role: c.placed for c in engine.models()[0].components}
    assert placed == {"diffusion_model": True, "text_encoder": False, "vae": True}
