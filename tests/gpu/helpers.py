"""Shared pieces of the GPU plan (``scripts/gpu-check``): placing a network through the real
manager and mover on the card, its inputs, and random full-size weights made on the card."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.patching.patcher import ModelPatcher

CUDA = "cuda:0"


def random_weights(module: nn.Module, dtype: torch.dtype, seed: int = 0) -> None:
    """Give a module built on ``meta`` seeded random host weights (drawn on the card: fast),
    scaled by 1/sqrt(fan-in) so activations stay O(1)."""
    g = torch.Generator(CUDA).manual_seed(seed)
    state = {}
    for key, meta in module.state_dict().items():
        shape = tuple(meta.shape)
        if not meta.is_floating_point():
            state[key] = torch.zeros(shape, dtype=meta.dtype)
            continue
        noise = torch.randn(shape, generator=g, device=CUDA)
        scale = 1 / math.sqrt(math.prod(shape[1:])) if len(shape) >= 2 else 0.1
        value = noise * scale + (1.0 if len(shape) == 1 and key.endswith(("weight", "scale")) else 0.0)
        state[key] = value.to(dtype).cpu()
    module.load_state_dict(state, assign=True, strict=True)


def place(
    patcher: ModelPatcher,
    free: int | Callable[[], int],
    *,
    pin: bool,
    device: str = CUDA,
    vram_state: str = "normal",
) -> tuple[MemoryManager, TorchMover]:
    mover = TorchMover(pin=pin, pinned_cap=1 << 40)
    mover.use_patcher(patcher)
    settings = PlanSettings(vram_state=vram_state, reserve_bytes=0, min_inference_bytes=0)
    probe = free if callable(free) else (lambda: free)
    manager = MemoryManager(probe, mover, settings=settings, device=device)
    manager.register(patcher, "model")
    manager.load_models([patcher]).raise_if_refused()
    return manager, mover


def weight_bytes(module: nn.Module) -> int:
    return sum(t.nbytes for t in module.state_dict().values())
