"""Pinned staging for streamed layers: a few reused buffers, each reused only once its previous
copy completed; a failed pin falls back to pageable copies with a note, never a failed load.

The backend (pinned allocator and copy events) is the seam: :class:`FakeBackend` hands out plain
host buffers and events the test completes by hand. The model is placed on ``meta`` by the real
mover, and the sync tracer proves where each host-to-device copy came from."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import save_file

from core.loading.loader import load_diffusion_model
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.memory.policy import MemorySettings, pinned_memory_cap
from core.ops.staging import StagingRing, build_ring, packed_bytes
from core.patching.patcher import ModelPatcher
from core.session.placement import Placement, PlacementConfig
from tests.core.ops import lora_patches, op_layers
from tests.fixtures.sync_trace import HostSyncTrace
from tests.fixtures.tiny_models import TINY_FLUX, _flux_inputs, _gen


class FakeEvent:
    def __init__(self, log: list[str], ring: list[StagingRing]) -> None:
        self.done = False
        self.log = log
        self.ring = ring

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.log.append("wait")
        self.done = True


class FakeBackend:
    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.events: list[FakeEvent] = []
        self.log: list[str] = []
        self.allocated: list[int] = []

    def pinned(self, nbytes: int) -> torch.Tensor:
        if self.fail:
            raise RuntimeError(self.fail)
        self.allocated.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    def record(self, stream: object) -> FakeEvent:
        self.events.append(FakeEvent(self.log, []))
        return self.events[-1]


def test_a_buffer_is_reused_only_after_its_copy_completed() -> None:
    backend = FakeBackend()
    ring = StagingRing(4096, 2, backend)
    layers = [(torch.full((16, 16), float(i)), torch.full((16,), -float(i))) for i in range(5)]
    views = []
    for w, b in layers[:2]:
        (hw, hb), slot = ring.stage([w, b])
        assert hw is not None and torch.equal(hw, w) and hb is not None and torch.equal(hb, b)
        assert ring.owns(hw) and ring.owns(hb)
        ring.issued(slot, None)
        views.append(hw)
    assert backend.log == [] and ring.waits == 0
    # the third layer takes buffer 0 again: its copy (layer 0) has not completed -> wait first
    (hw, _), slot = ring.stage(list(layers[2]))
    assert backend.log == ["wait"] and ring.waits == 1 and hw.data_ptr() == views[0].data_ptr()
    ring.issued(slot, None)
    backend.events[1].done = True  # layer 1's copy completed: buffer 1 is reused without waiting
    (hw, _), slot = ring.stage(list(layers[3]))
    assert ring.waits == 1 and hw.data_ptr() == views[1].data_ptr() and torch.equal(hw, layers[3][0])
    assert backend.allocated == [4096, 4096]  # two buffers, allocated once


def test_a_layer_larger_than_a_buffer_is_refused_and_packing_is_aligned() -> None:
    ring = StagingRing(1024, 2, FakeBackend())
    with pytest.raises(ValueError, match="do not fit"):
        ring.stage([torch.zeros(300, dtype=torch.float32)])
    assert packed_bytes([torch.zeros(10), torch.zeros(3), None]) == 512 + 12


def test_building_falls_back_with_a_reason() -> None:
    ring, note = build_ring(1 << 20, cap=1 << 20)
    assert ring is None and note.startswith("pinning skipped") and "pageable" in note
    ring, note = build_ring(1 << 20, cap=1 << 30, backend=FakeBackend(fail="cudaHostAlloc failed: limit"))
    assert (
        ring is None and note == "pinning failed: cudaHostAlloc failed: limit; streaming from pageable memory"
    )


def _placed(
    tmp_path: Path, backend: FakeBackend, notes: list[tuple[str, str]]
) -> tuple[torch.nn.Module, TorchMover]:
    path = tmp_path / "flux.safetensors"
    save_file({k: v.half().contiguous() for k, v in TINY_FLUX.file_state().items()}, path)
    module = load_diffusion_model(path).module
    patcher = ModelPatcher(module)
    patcher.add_patches("lora", lora_patches(module, op_layers(module)[::3], 1))
    mover = TorchMover(
        pin=True, pinned_cap=1 << 30, staging=backend, on_pinning=lambda m, r: notes.append((m, r))
    )
    mover.use_patcher(patcher)
    size = sum(t.nbytes for t in module.state_dict().values())
    settings = PlanSettings(vram_state="normal", reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: size // 3, mover, settings=settings, device="meta")
    manager.register(patcher, "flux")
    manager.load_models([patcher]).raise_if_refused()
    return module, mover


def _forward(module: torch.nn.Module, trace: HostSyncTrace) -> None:
    c = TINY_FLUX.config
    img, img_ids, txt_ids, t = _flux_inputs(c.in_channels)
    txt = torch.randn(2, 5, c.context_in_dim, generator=_gen(1))
    y = torch.randn(2, c.vec_in_dim, generator=_gen(1))
    g = torch.tensor([3.5, 1.0]) if c.guidance_embed else None
    inputs = [a for a in (img, img_ids, txt, txt_ids, t, y, g) if a is not None]
    trace.allow(inputs)
    with torch.no_grad(), trace:
        module(*[a.to("meta") for a in inputs])  # type: ignore[operator]


def test_streamed_layers_copy_through_the_staging_buffers(tmp_path: Path) -> None:
    backend, notes = FakeBackend(), []
    module, mover = _placed(tmp_path, backend, notes)
    rings = [p.ring for p in mover._placed.values()]
    assert notes == [] and len(rings) == 1 and rings[0] is not None
    ring = rings[0]
    trace = HostSyncTrace("meta")
    trace.allow(s.buffer for s in ring._slots)  # only copies out of the pinned buffers are allowed
    _forward(module, trace)
    assert not trace.findings, trace.summary()
    assert ring.staged > 0 and len(backend.allocated) == 2


def test_a_failed_pin_streams_from_pageable_memory_and_says_so(tmp_path: Path) -> None:
    backend, notes = FakeBackend(fail="CUDA error: out of memory (pinned)"), []
    module, mover = _placed(tmp_path, backend, notes)
    assert notes == [
        ("flux", "pinning failed: CUDA error: out of memory (pinned); streaming from pageable memory")
    ]
    (placed,) = mover._placed.values()
    assert placed.ring is None and placed.streamed is not None
    trace = HostSyncTrace("meta")
    trace.allow(t for s in placed.streamed.layers.values() for t in (s.weight, s.bias))
    _forward(module, trace)  # the model still runs, its layers copied from where they are
    assert not trace.findings, trace.summary()


def test_the_placement_reads_the_pinned_settings_and_shows_a_fallback() -> None:
    on = Placement(None, PlacementConfig(simulate_bytes=1 << 30))
    ram = psutil.virtual_memory().total
    assert on.mover.pin and on.mover.pinned_cap == pinned_memory_cap(ram, sys.platform, MemorySettings())
    off = Placement(None, PlacementConfig(MemorySettings(pinned_memory=False), simulate_bytes=1 << 30))
    assert not off.mover.pin
    assert on.mover.on_pinning is not None
    on.mover.on_pinning("SD1.5 UNet", "pinning failed: boom; streaming from pageable memory")
    (event,) = on.events.events()
    assert event.kind == "keep" and event.reason == "Pinning failed: boom; streaming from pageable memory."
