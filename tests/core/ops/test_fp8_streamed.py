"""A streamed fp8 layer that no LoRA touches multiplies in fp8 like a resident one; only the
layers a patch changes are computed upcast. (The mover always set a patch function, so every
streamed layer used to fall back to upcast.) ``torch._scaled_mm`` runs on this CPU build, and the
device's fp8 ability is the one thing stood in for."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.ops import fp8 as fp8_ops
from core.ops.fp8 import Fp8Linear
from core.patching.adapters import LoRAAdapter
from core.patching.patcher import KeyPatch, ModelPatcher
from core.quant.fp8_weight import ScaledFp8Weight
from tests.fixtures.fp8_scaled import quantize


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.layers = nn.ModuleList()
        for _ in range(3):
            layer = Fp8Linear(32, 32, bias=False, device="meta")
            q, s = quantize(torch.randn(32, 32, generator=g))
            layer.weight = nn.Parameter(ScaledFp8Weight(q, s), requires_grad=False)
            self.layers.append(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_streamed_fp8_layers_without_a_patch_multiply_in_fp8(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        fp8_ops.scaled_mm_linear(torch.randn(2, 32), quantize(torch.randn(32, 32))[0], None)
    except (NotImplementedError, RuntimeError) as exc:
        pytest.skip(f"torch._scaled_mm does not run on this CPU build: {exc}")
    monkeypatch.setattr(fp8_ops, "device_has_fp8_matmul", lambda device: True)
    used: list[int] = []
    real = fp8_ops.scaled_mm_linear
    monkeypatch.setattr(
        fp8_ops, "scaled_mm_linear", lambda x, w, *a: used.append(w.shape[0]) or real(x, w, *a)
    )
    module = Stack()
    patcher = ModelPatcher(module)
    g = torch.Generator().manual_seed(1)
    lora = LoRAAdapter(torch.randn(32, 2, generator=g), torch.randn(2, 32, generator=g), alpha=1.0)
    patcher.add_patches("lora", {"layers.1.weight": [KeyPatch(lora)]})
    mover = TorchMover()
    mover.use_patcher(patcher)
    settings = PlanSettings(vram_state="no_vram", reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: 1 << 20, mover, settings=settings, device="cpu")
    manager.register(patcher, "stack")
    manager.load_models([patcher]).raise_if_refused()
    streams = [layer.stream for layer in module.layers]
    assert all(s is not None for s in streams)
    assert [s.patched() for s in streams if s is not None] == [False, True, False]
    with torch.no_grad():
        module(torch.randn(4, 32, generator=g, dtype=torch.bfloat16))
    assert len(used) == 2  # layers 0 and 2 in fp8; layer 1 (patched) upcast
