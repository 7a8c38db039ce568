"""Loading resident weights through two pinned buffers (``core.ops.bulk_copy``): the copies are the
tensors' bytes exactly, small tensors share a buffer, large ones are cut into pieces, a buffer is
refilled only after its previous copy completed, and the mover takes this path only where it pays
(a CUDA load with pinning on; here a stand-in backend on ``meta``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core.loading.loader import load_diffusion_model
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.ops import bulk_copy
from core.ops.bulk_copy import copy_through_staging, stageable
from core.ops.staging import StagingRing
from tests.core.ops.test_staging import FakeBackend
from tests.fixtures.tiny_models import TINY_FLUX


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [
        torch.randn(3, 5, generator=g),  # small ones share a buffer
        torch.randn(7, generator=g).to(torch.bfloat16),
        torch.empty(0),
        torch.randint(0, 255, (4099,), generator=g, dtype=torch.uint8),  # cut into pieces
        torch.randn(2, 2, generator=g).to(torch.float16),
        torch.tensor(True),
    ]


def test_the_copies_are_the_bytes_of_the_tensors_in_any_packing() -> None:
    backend = FakeBackend()
    ring = StagingRing(2048, 2, backend)
    tensors = _tensors()
    copies = copy_through_staging(tensors, torch.device("cpu"), ring)
    for t, c in zip(tensors, copies, strict=True):
        assert (c.shape, c.dtype) == (t.shape, t.dtype)
        assert torch.equal(c.view(-1).view(torch.uint8), t.view(-1).view(torch.uint8))
        assert c.data_ptr() != t.data_ptr() or t.numel() == 0  # fresh allocations
    # 4099 bytes in 1536-byte pieces and the small ones packed: 5 buffer fills, not one per piece
    assert ring.staged == 5
    assert backend.log.count("wait") == 3  # each refill waited for that buffer's previous copy


def test_only_plain_contiguous_host_tensors_are_staged() -> None:
    t = torch.zeros(4, 4)
    assert stageable(t) and stageable(torch.nn.Parameter(t, requires_grad=False))
    assert not stageable(t.t())  # not contiguous
    assert not stageable(torch.zeros(2, device="meta"))


@pytest.mark.parametrize("pin", [True, False])
def test_the_mover_loads_through_the_buffers_only_with_pinning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pin: bool
) -> None:
    monkeypatch.setattr(bulk_copy, "SLOT_BYTES", 4096)
    monkeypatch.setattr("core.memory.mover.SLOT_BYTES", 4096)
    path = tmp_path / "tiny.safetensors"
    save_file(TINY_FLUX.state(), str(path))
    module = load_diffusion_model(path).module
    backend = FakeBackend()
    mover = TorchMover(pin=pin, staging=backend)
    manager = MemoryManager(lambda: 1 << 40, mover, settings=PlanSettings(vram_state="normal"), device="meta")
    manager.load_models([module]).raise_if_refused()
    assert all(t.is_meta for t in module.state_dict().values())
    assert (len(backend.allocated) == 2) == pin  # the two load buffers (nothing streams here)
    manager.unload_all()
    assert not any(t.is_meta for t in module.state_dict().values())  # the file's tensors are back
