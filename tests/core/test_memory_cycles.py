"""100 load / patch / place / unload cycles do not grow the process's memory."""

from __future__ import annotations

import gc
from pathlib import Path

import psutil
import torch

from core.loading.loader import load_checkpoint
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.patching.lora_stack import LoraStack
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors


def _cycle(ckpt: Path, lora: Path, manager: MemoryManager, mover: TorchMover) -> None:
    bundle = load_checkpoint(ckpt)
    stack = LoraStack(bundle.components)
    stack.add(lora, 0.7)
    patcher = stack.patchers["diffusion_model"]
    mover.use_patcher(patcher)
    manager.register(patcher, "unet")
    manager.load_models([patcher]).raise_if_refused()
    stack.set_strength(next(iter(stack.entries)), model=-0.4)
    stack.apply()
    manager.unload_all()
    mover.release(bundle.diffusion_model.module)
    stack.unpatch()


def test_rss_stays_flat_over_100_cycles(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ckpt = write_tensors(tmp_path / "tiny.safetensors", checkpoint_tensors("sd1"))
    unet = load_checkpoint(ckpt).diffusion_model.module.state_dict()
    g = torch.Generator().manual_seed(1)
    tensors = {}
    for k, v in unet.items():
        if k.endswith("attn2.to_k.weight"):
            name = "lora_unet_" + k[: -len(".weight")].replace(".", "_")
            tensors[f"{name}.lora_down.weight"] = torch.randn(2, v.shape[1], generator=g)
            tensors[f"{name}.lora_up.weight"] = torch.randn(v.shape[0], 2, generator=g)
    lora = write_tensors(tmp_path / "l.safetensors", tensors)
    settings = PlanSettings(vram_state="normal", reserve_bytes=0, min_inference_bytes=0)
    mover = TorchMover()
    manager = MemoryManager(lambda: 1 << 40, mover, settings=settings, device="cpu")
    proc = psutil.Process()
    for _ in range(15):  # warm up allocator pools and caches
        _cycle(ckpt, lora, manager, mover)
    gc.collect()
    before = proc.memory_info().rss
    for _ in range(100):
        _cycle(ckpt, lora, manager, mover)
    gc.collect()
    after = proc.memory_info().rss
    growth = (after - before) / before
    print(f"RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB ({growth:+.2%}) over 100 cycles")
    assert growth < 0.02
    assert len(manager.loaded()) <= 1  # dropped bundles left the manager (weak references)
