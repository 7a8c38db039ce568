"""The window's parts on their own: error words, fit arithmetic, settings, monitor, demo library,
the dangling-thread guard."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QThread

from app.backend.messages import TaskError
from app.backend.monitor import MemoryMonitor
from app.demo import DemoLibrary, is_sparse_demo
from app.gui.errors import describe
from app.gui.settings import AppSettings, SettingsDialog
from core.inspect import inspect_file
from core.library import Entry
from core.library.entry import Component
from core.memory.fit import estimate_fit
from core.memory.policy import VramState
from core.memory.probes import FakeProbe
from core.session import Session
from tests.app.conftest import running_threads
from tests.app.util import strict

GIB = 1024**3


def test_errors_read_as_plain_words() -> None:
    bug = describe(TaskError("load", "internal", "KeyError: 'x'", internal=True))
    assert bug.title == "Something went wrong inside Loadout" and "not changed" in bug.text
    damaged = describe(TaskError("load", "truncated", "model.safetensors is cut short. Download it again."))
    assert (
        damaged.title == "Damaged file"
        and damaged.text.endswith("Download it again.")
        and damaged.level == "error"
    )
    stopped = describe(TaskError("run", "interrupted", "stopped"))
    assert stopped.level == "info" and "nothing was left half-done" in stopped.text
    unknown = describe(TaskError("scan", "some_new_code", "What happened. Why. Fix."))
    assert unknown.title == "Reading the model folders failed" and unknown.text == "What happened. Why. Fix."


def _entry(kind: str, *parts: tuple[str, int, int]) -> Entry:
    comps = tuple(Component(role, "sdxl", "", 10, params, nbytes, "fp16") for role, params, nbytes in parts)  # type: ignore[arg-type]
    return Entry(
        Path("m.safetensors"), "folder", Path("."), "", None, 1, 0, status="ok", kind=kind, components=comps
    )


def test_fit_estimate_fits_partial_and_no() -> None:
    model = _entry("checkpoint", ("diffusion_model", 2_500_000_000, 5 * GIB), ("vae", 80_000_000, GIB // 6))
    gpu = dict(where="GPU", on_gpu=True, ram_available=32 * GIB, reserve=400 * 2**20)
    assert estimate_fit(model, 24 * GIB, **gpu).verdict == "fits"  # type: ignore[arg-type]
    partial = estimate_fit(model, 4 * GIB, **gpu)  # type: ignore[arg-type]
    assert partial.verdict == "partial" and partial.streamed == partial.total - partial.usable > 0
    assert estimate_fit(model, 4 * GIB, where="GPU", on_gpu=True, ram_available=GIB).verdict == "no"
    assert estimate_fit(model, 8 * GIB, where="RAM", on_gpu=False, ram_available=8 * GIB).verdict == "fits"
    assert estimate_fit(model, 2 * GIB, where="RAM", on_gpu=False, ram_available=2 * GIB).verdict == "no"
    fp8 = estimate_fit(model, 24 * GIB, dtype="fp8_e4m3fn", **gpu)  # type: ignore[arg-type]
    assert fp8.total == 2_580_000_000 and {c.dtype for c in fp8.components} == {"fp8_e4m3fn"}
    lora = estimate_fit(_entry("lora"), 24 * GIB, **gpu)  # type: ignore[arg-type]
    assert lora.verdict == "n/a"


def test_settings_round_trip_through_qsettings_and_the_dialog(qtbot, tmp_path: Path) -> None:
    store = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert AppSettings.load(store) == AppSettings()
    chosen = AppSettings(
        folders=("/models/comfy", "/models/a1111"), vram_mode="low-vram", reserve_mib=700,
        dtype_overrides={"vae": "fp32"}, dark_theme=False, lora_min=-4.0, lora_max=4.0,
    )  # fmt: skip
    chosen.save(store)
    again = AppSettings.load(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    assert again == chosen
    memory = again.memory_settings()
    assert memory.vram_state is VramState.LOW_VRAM and memory.reserve_bytes == 700 * 2**20
    assert memory.override_for("vae") is not None and memory.override_for("vae").storage == "fp32"  # type: ignore[union-attr]
    dialog = SettingsDialog(again)
    qtbot.addWidget(dialog)
    dialog.dtypes["diffusion_model"].setCurrentIndex(dialog.dtypes["diffusion_model"].findData("bf16"))
    dialog.reserve.setValue(-1)
    dialog.vram.setCurrentIndex(0)
    result = dialog.settings()
    assert result.dtype_overrides == {"vae": "fp32", "diffusion_model": "bf16"}
    assert result.reserve_mib == -1 and result.vram_mode == "auto" and result.folders == chosen.folders
    store.setValue("memory/reserve_mib", "not json")
    assert AppSettings.load(store).reserve_mib == -1  # a damaged value falls back to the default


def test_memory_monitor_with_and_without_a_gpu() -> None:
    cpu = MemoryMonitor(None)
    s = cpu.sample()
    assert s.rss > 0 and 0 < s.ram_used <= s.ram_total and s.gpu_used is None and not cpu.has_gpu
    assert cpu.free_bytes()[1] == "system RAM"
    card = FakeProbe(8 * GIB, used=GIB)
    gpu = MemoryMonitor(card)
    card.allocate(2 * GIB)
    s = gpu.sample()
    assert (s.gpu_total, s.gpu_allocated, s.gpu_used) == (8 * GIB, 2 * GIB, 3 * GIB)
    assert gpu.peak_gpu == 3 * GIB and gpu.free_bytes() == (5 * GIB, "Simulated GPU")


def test_the_memory_panel_plots_gpu_curves_and_event_markers(qtbot) -> None:
    from app.backend.messages import EngineEvent
    from app.gui.memory_panel import MemoryPanel

    panel = MemoryPanel(MemoryMonitor(FakeProbe(8 * GIB)))
    qtbot.addWidget(panel)
    assert {"gpu_used", "gpu_reserved", "gpu_allocated", "rss", "ram_used"} == set(panel.plot.curves)
    assert panel.note.text().startswith("GPU: Simulated GPU")
    panel.add_event(EngineEvent(panel.monitor.start + 1.0, "load", "load a.safetensors", "because"))
    panel.plot.add_event(
        2.0, "evict", "evicted SD1.5 UNet, 1.6 GiB, to fit SDXL"
    )  # the manager's events later
    assert len(panel.plot.markers) == 2 and panel.events.topLevelItemCount() == 1
    panel.plot.timer.stop()
    cpu_panel = MemoryPanel(MemoryMonitor(None))
    qtbot.addWidget(cpu_panel)
    assert "No GPU found" in cpu_panel.note.text() and set(cpu_panel.plot.curves) == {"rss", "ram_used"}
    cpu_panel.plot.timer.stop()


def test_demo_library_is_real_layout_and_the_sparse_files_cost_no_disk(demo_library: DemoLibrary) -> None:
    found = {p.name: inspect_file(p).to_json() for p in demo_library.folder.rglob("*.safetensors")}
    kinds = {name: (r["kind"], r["family"]) for name, r in found.items()}
    assert kinds["loadout-demo-sd15-tiny.safetensors"] == ("checkpoint", "sd1")
    assert kinds["sdxl-base-demo.safetensors"] == ("checkpoint", "sdxl")
    assert kinds["flux1-schnell-demo.safetensors"] == ("diffusion_model", "flux-schnell")
    assert kinds["demo-inkwash-style-sd15.safetensors"] == ("lora", "sd1")
    assert kinds["demo-detail-tweaker-sdxl.safetensors"] == ("lora", "sdxl")
    assert kinds["t5xxl-demo_fp16.safetensors"] == ("text_encoder", "t5-xxl")
    assert kinds["sdxl_vae-demo.safetensors"] == ("vae", "vae-sd")
    assert found["damaged-download.safetensors"]["error"] is not None
    assert is_sparse_demo(found["sdxl-base-demo.safetensors"]["metadata"])
    assert not is_sparse_demo(found["loadout-demo-sd15-tiny.safetensors"]["metadata"])
    apparent = sum(p.stat().st_size for p in demo_library.folder.rglob("*"))
    on_disk = sum(p.stat().st_blocks * 512 for p in demo_library.folder.rglob("*"))
    assert apparent > 30e9 and on_disk < 100e6
    assert (demo_library.checkpoint.with_name(demo_library.checkpoint.stem + ".preview.png")).is_file()


def test_dtype_override_converts_on_load(qtbot, demo_library: DemoLibrary) -> None:
    from app.backend.backend import Backend

    backend = Backend(Session())
    try:
        backend.set_dtype_overrides({"diffusion_model": "fp32"})
        with strict(qtbot, backend, "started", "model_loaded", "finished") as rec:
            backend.load(demo_library.checkpoint, "checkpoint")
        dtypes = {c.role: c.dtype for c in rec.first("model_loaded").components}
        assert dtypes == {"diffusion_model": "fp32", "text_encoder": "fp16", "vae": "fp16"}
    finally:
        assert backend.shutdown()


def test_empty_window_offers_the_demo_library(qtbot, make_window, tmp_path: Path, monkeypatch) -> None:
    import app.backend.backend as worker_module

    demo_dir = tmp_path / "demo"
    real = worker_module.ensure_demo_library
    monkeypatch.setattr(worker_module, "ensure_demo_library", lambda folder: real(folder or demo_dir))
    window = make_window()
    assert window.browser.empty.isVisible()
    with strict(qtbot, window.backend, "started", "demo_ready", "finished"):
        window.browser.demo_requested.emit()  # the "Open the demo library" button
    qtbot.waitUntil(
        lambda: len(window.browser.model.entries()) == 10 and not window.backend.busy, timeout=30000
    )
    assert window.browser.tree.isVisible() and window.settings.folders == ()  # a session folder, not saved


def test_the_thread_guard_sees_a_running_qthread() -> None:
    thread = QThread()
    thread.setObjectName("left-running")
    thread.start()
    try:
        assert running_threads([thread]) == [thread]
    finally:
        thread.quit()
        assert thread.wait(5000)
    assert running_threads([thread]) == []


@pytest.mark.parametrize(
    "code", ["truncated", "lora_family_mismatch", "no_model", "out_of_memory", "unsafe_pickle"]
)
def test_known_codes_have_their_own_title(code: str) -> None:
    assert "failed" not in describe(TaskError("load", code, "x.")).title


def test_fit_estimate_keeps_back_the_predicted_activations_of_the_family_not_a_fixed_constant() -> None:
    from dataclasses import replace

    from core.memory.inference import Workload, predict

    model = replace(_entry("checkpoint", ("diffusion_model", 2_500_000_000, 5 * GIB)), family="sdxl")
    est = estimate_fit(model, 8 * GIB, where="GPU", on_gpu=True, ram_available=32 * GIB, headroom=0)
    assert est.usable == 8 * GIB - predict("sdxl", Workload(1024, 1024, 1, 2, "cuda_flash"))
    gpu = dict(where="GPU", on_gpu=True, ram_available=32 * GIB, headroom=0)
    fp32 = estimate_fit(model, 8 * GIB, dtype="fp32", **gpu)  # type: ignore[arg-type]
    assert 8 * GIB - fp32.usable == 2 * (8 * GIB - est.usable)  # fp32 activations: twice the bytes


def test_a_fixed_activation_headroom_stands_for_the_activations_in_the_fit_estimate() -> None:
    """As the manager takes it: a floor above the reserve (Settings, the demo's card) is the
    activations' room, so the estimate does not add the family's prediction on top."""
    from dataclasses import replace

    model = replace(_entry("checkpoint", ("diffusion_model", 2_500_000_000, 5 * GIB)), family="sdxl")
    gpu = dict(where="GPU", on_gpu=True, ram_available=32 * GIB, reserve=0)
    fixed = estimate_fit(model, 8 * GIB, headroom=GIB, headroom_fixed=True, **gpu)  # type: ignore[arg-type]
    assert fixed.usable == 7 * GIB
    predicted = estimate_fit(model, 8 * GIB, headroom=0, **gpu)  # type: ignore[arg-type]
    assert predicted.usable < 8 * GIB
