"""The backend worker on its own: signals in strict order, work on the worker thread, real weights."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from PySide6.QtCore import QThread

from app.backend.backend import Backend
from app.backend.messages import ModelInfo, StackInfo, TaskError
from app.demo import DemoLibrary
from core.session import Session, SlotId
from core.session.testrun import RunConfig
from tests.app.util import strict


@pytest.fixture
def backend(qtbot) -> Iterator[Backend]:
    b = Backend(Session())
    yield b
    assert b.shutdown(), "the worker thread did not end"


def _weights(backend: Backend) -> dict[str, torch.Tensor]:
    """The diffusion model's weights (read from the test thread while the worker is idle)."""
    main = backend.session.loaded[SlotId.MAIN]
    module = next(c.module for c in main.components if c.role == "diffusion_model")
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_scan_load_lora_signals_in_strict_order_from_the_worker_thread(
    qtbot, backend: Backend, demo_library: DemoLibrary
) -> None:
    w = backend.worker
    emitted_on: set[object] = set()
    w.started.connect(lambda _t: emitted_on.add(QThread.currentThread()), type=_direct())
    busy: list[bool] = []
    backend.busy_changed.connect(busy.append)

    with strict(qtbot, backend, "started", "scan_done", "finished"):
        backend.scan([str(demo_library.folder)])
    assert busy == [True, False]

    with strict(
        qtbot, backend, "started", "model_loaded", "models_changed", "stack_changed", "finished"
    ) as rec:
        backend.load(demo_library.checkpoint, "checkpoint")
    info: ModelInfo = rec.first("model_loaded")
    assert info.family == "sd1" and info.kind == "checkpoint"
    assert sorted(c.role for c in info.components) == ["diffusion_model", "text_encoder", "vae"]
    assert all(c.device == "cpu" and c.dtype == "fp16" for c in info.components)
    before = _weights(backend)

    with strict(qtbot, backend, "started", "stack_changed", "models_changed", "finished") as rec:
        backend.add_lora(demo_library.lora, 0.8, 0.5)
    stack: StackInfo = rec.first("stack_changed")
    (lora,) = stack.loras
    assert (lora.matched, lora.unmatched, lora.family_warning) == (40, 0, None)
    assert (lora.model_strength, lora.clip_strength, stack.baked) == (0.8, 0.5, True)
    after = _weights(backend)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) == 32  # the UNet's attention weights the LoRA targets

    with qtbot.waitSignal(backend.stack_changed) as preview:
        backend.preview_strength(lora.id, -0.5, 0.5)  # a slider moving: side path, weights untouched
    assert preview.args[0].baked is False and preview.args[0].loras[0].model_strength == -0.5
    assert all(torch.equal(v, after[k]) for k, v in _weights(backend).items())

    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        backend.bake_strength(lora.id, -0.5, 0.5)  # released: baked
    assert rec.first("stack_changed").baked is True
    baked = _weights(backend)
    key = changed[0]
    delta_before = after[key].float() - before[key].float()
    delta_now = baked[key].float() - before[key].float()
    torch.testing.assert_close(delta_now, delta_before * (-0.5 / 0.8), atol=2e-3, rtol=2e-2)

    with strict(qtbot, backend, "started", "run_done", "finished") as rec:
        backend.test_run(RunConfig(steps=2, width=64, height=64))
    report = rec.first("run_done")
    assert report.steps == 2 and report.seconds_per_step > 0 and report.output["shape"] == [1, 4, 8, 8]

    assert emitted_on == {backend.thread}, "engine work must run on the worker thread"
    assert backend.thread is not QThread.currentThread()


def test_errors_come_back_as_typed_signals_and_the_worker_lives_on(
    qtbot, backend: Backend, demo_library: DemoLibrary, tmp_path
) -> None:
    with strict(qtbot, backend, "started", "failed", "finished") as rec:
        backend.add_lora(demo_library.lora)  # nothing loaded yet
    error: TaskError = rec.first("failed")
    assert error.code == "no_model" and not error.internal

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 64)
    with strict(qtbot, backend, "started", "failed", "finished") as rec:
        backend.load(bad, "checkpoint")
    error = rec.first("failed")
    assert error.code in ("not_a_model", "invalid_header", "truncated") and error.path == bad

    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        backend.load(demo_library.checkpoint, "checkpoint")
    sdxl_lora = demo_library.folder / "models/loras/demo-detail-tweaker-sdxl.safetensors"
    with strict(qtbot, backend, "started", "failed", "finished") as rec:
        backend.add_lora(sdxl_lora)
    assert rec.first("failed").code == "lora_family_mismatch"
    with strict(qtbot, backend, "started", "stack_changed", "finished") as rec:
        backend.add_lora(sdxl_lora, force=True)
    (lora,) = rec.first("stack_changed").loras
    assert lora.family_warning and lora.matched == 0 and lora.unmatched + lora.shape_mismatches > 0


def test_interrupt_is_a_direct_flag_not_a_queued_call(backend: Backend) -> None:
    backend._submitted()  # as if a task were queued
    backend.interrupt()
    assert backend.stop_flag.is_set(), "the flag must be set at once, in the calling thread"
    backend._on_finished("load")
    backend.stop_flag.clear()


def _direct():
    from PySide6.QtCore import Qt

    return Qt.ConnectionType.DirectConnection


def test_the_stop_flag_is_cleared_when_a_job_starts_so_a_stop_never_carries_over(
    qtbot, backend: Backend
) -> None:
    """A Stop that lands as a job ends (after its last check, even after its last line) ends
    nothing else: the next job starts with the flag clear and runs to its end."""
    from PySide6.QtCore import Qt

    seen: list[bool] = []
    pressed: list[bool] = []

    def press_once(task: str) -> None:  # Stop pressed at the very end of the first job, on its thread
        if not pressed:
            pressed.append(True)
            backend.stop_flag.set()

    backend.worker.finished.connect(press_once, Qt.ConnectionType.DirectConnection)

    def second(r) -> None:
        seen.append(backend.stop_flag.is_set())
        r.check()  # would raise InterruptedByUser if the old Stop carried over

    with strict(qtbot, backend, "started", "finished"):
        backend.submit("load", lambda r: None)
    with strict(qtbot, backend, "started", "finished"):
        backend.submit("load", second)
    assert pressed and seen == [False]
