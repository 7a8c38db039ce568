"""The torch mover on a real tiny SD1.5 UNet: a LoRA stack changed while the model is placed
(resident and streamed layers) gives exactly what baking the same stack on the CPU gives; unloading
restores the file's tensors and stops streaming."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.loading.loader import load_checkpoint
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.ops.layers import CastWeights
from core.patching.adapters import DiffAdapter
from core.patching.lora_stack import LoraStack
from core.patching.patcher import KeyPatch
from core.session.testrun import RunConfig, perform_test_run
from tests.fixtures.st_files import write_at_odd_offsets
from tests.fixtures.tiny_models import checkpoint_tensors

CFG = RunConfig(steps=1, width=64, height=64, seed=5)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("mover")
    torch.manual_seed(0)
    ckpt = d / "tiny.safetensors"  # every tensor off a 64-byte boundary: see test_placement_alignment
    assert all(write_at_odd_offsets(ckpt, checkpoint_tensors("sd1"), residue=4).values())
    unet = load_checkpoint(ckpt).diffusion_model.module.state_dict()
    out = []
    for seed, ends in ((1, ("attn2.to_k.weight", "attn1.to_q.weight")), (2, ("attn1.to_v.weight",))):
        g = torch.Generator().manual_seed(seed)
        lora = {}
        for k, v in unet.items():
            if k.endswith(ends):
                name = "lora_unet_" + k[: -len(".weight")].replace(".", "_")
                lora[f"{name}.lora_down.weight"] = torch.randn(2, v.shape[1], generator=g) * 0.3
                lora[f"{name}.lora_up.weight"] = torch.randn(v.shape[0], 2, generator=g) * 0.3
        write_at_odd_offsets(d / f"lora{seed}.safetensors", lora, residue=8 * seed)
        out.append(d / f"lora{seed}.safetensors")
    return ckpt, out[0], out[1]


def _baked(ckpt: Path, loras: list[tuple[Path, float]]) -> dict[str, object]:
    bundle = load_checkpoint(ckpt)
    stack = LoraStack(bundle.components)
    for path, strength in loras:
        stack.add(path, strength)
    stack.apply()
    return perform_test_run(bundle.diffusion_model.module, CFG).output_summary()


def _placed(ckpt: Path, free: int) -> tuple[MemoryManager, TorchMover, LoraStack, torch.nn.Module]:
    bundle = load_checkpoint(ckpt)
    stack = LoraStack(bundle.components)
    patcher = stack.patchers["diffusion_model"]
    mover = TorchMover()
    mover.use_patcher(patcher)
    settings = PlanSettings(vram_state="normal", reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: free, mover, settings=settings, device="cpu")
    manager.register(patcher, "unet")
    return manager, mover, stack, bundle.diffusion_model.module


@pytest.mark.parametrize("fraction", [4.0, 0.4])
def test_stack_changes_while_placed_match_baking(files: tuple[Path, Path, Path], fraction: float) -> None:
    ckpt, lora1, lora2 = files
    size = sum(t.nbytes for t in load_checkpoint(ckpt).diffusion_model.module.state_dict().values())
    manager, mover, stack, module = _placed(ckpt, int(size * fraction))
    patcher = stack.patchers["diffusion_model"]
    stack.add(lora1, 0.8)
    manager.load_models([patcher]).raise_if_refused()
    entry = manager.register(patcher)
    assert entry.streaming == (fraction < 1.0) and (entry.loaded_bytes > 0)
    run = lambda: perform_test_run(module, CFG).output_summary()  # noqa: E731
    assert run() == _baked(ckpt, [(lora1, 0.8)])

    first = next(iter(stack.entries))
    stack.set_strength(first, model=-0.5)
    changed = mover.refresh(entry)
    assert changed == (len(stack.entries[first].keys["diffusion_model"]) if fraction > 1 else changed)
    assert mover.refresh(entry) == 0  # nothing changed since
    assert run() == _baked(ckpt, [(lora1, -0.5)])

    stack.add(lora2, 1.2)
    mover.refresh(entry)
    assert run() == _baked(ckpt, [(lora1, -0.5), (lora2, 1.2)])

    stack.remove(first)
    mover.refresh(entry)
    assert run() == _baked(ckpt, [(lora2, 1.2)])


def test_unload_models_restores_the_file_tensors_and_stops_streaming(files: tuple[Path, Path, Path]) -> None:
    ckpt, lora1, _ = files
    size = sum(t.nbytes for t in load_checkpoint(ckpt).diffusion_model.module.state_dict().values())
    manager, _, stack, module = _placed(ckpt, size // 3)
    before = {k: v.data_ptr() for k, v in module.state_dict().items()}
    stack.add(lora1, 0.8)
    patcher = stack.patchers["diffusion_model"]
    manager.load_models([patcher]).raise_if_refused()
    streamed = [m for m in module.modules() if isinstance(m, CastWeights) and m.stream is not None]
    assert streamed, "a third of the model fits: the rest must stream"
    result = manager.unload_models([patcher], "you offloaded it")
    assert [e.kind for e in result.events] == ["unload"]
    assert result.events[0].reason.endswith("to system RAM: you offloaded it.")
    assert {k: v.data_ptr() for k, v in module.state_dict().items()} == before
    assert all(m.stream is None for m in module.modules() if isinstance(m, CastWeights))
    assert manager.loaded() == []
    assert perform_test_run(module, CFG).output_summary() == _baked(ckpt, [])  # the CPU copy is clean


def test_a_partial_unload_streams_what_left_the_device_with_its_patches(
    files: tuple[Path, Path, Path],
) -> None:
    ckpt, lora1, _ = files
    size = sum(t.nbytes for t in load_checkpoint(ckpt).diffusion_model.module.state_dict().values())
    free = {"bytes": int(size * 0.6)}
    bundle = load_checkpoint(ckpt)
    stack = LoraStack(bundle.components)
    stack.add(lora1, 0.8)
    patcher = stack.patchers["diffusion_model"]
    mover = TorchMover()
    mover.use_patcher(patcher)
    settings = PlanSettings(vram_state="normal", reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: free["bytes"], mover, settings=settings, device="cpu")
    entry = manager.register(patcher, "unet")
    manager.load_models([patcher]).raise_if_refused()
    free["bytes"] = -int(size * 0.2)  # another program took what was left and more: give some back
    manager.free_memory(0, keep=())
    assert any(e.kind == "partial_unload" for e in manager.events.events())
    module = bundle.diffusion_model.module
    idle = [
        n for n, m in module.named_modules()
        if isinstance(m, CastWeights) and m.stream is None and n not in entry.loaded_modules
        and getattr(m, "weight", None) is not None
    ]  # fmt: skip
    assert idle == []  # every op layer is resident or streams (patched at cast time)
    assert perform_test_run(module, CFG).output_summary() == _baked(ckpt, [(lora1, 0.8)])


def test_device_copies_leave_no_cached_deltas_behind(files: tuple[Path, Path, Path]) -> None:
    ckpt, lora1, _ = files
    _, _, stack, _ = _placed(ckpt, 1 << 40)
    stack.add(lora1, 0.8)
    patcher = stack.patchers["diffusion_model"]
    key = next(iter(patcher.patched_keys()))
    weight, _ = patcher.patched_weight(key, patcher.original(key).to("meta"), cache=False)
    assert weight.is_meta and patcher._state.deltas == {}  # a device copy caches nothing
    patcher.patched_weight(key)
    assert patcher._state.deltas == {}  # plain LoRAs bake from their factors: nothing to cache
    # a mixed stack (LoRA + a full diff) goes through cached deltas, on a CPU bake only
    diff = DiffAdapter(torch.full(tuple(patcher.original(key).shape), 0.01), module="d")
    patcher.add_patches("diff", {key: [KeyPatch(diff)]})
    weight, _ = patcher.patched_weight(key, patcher.original(key).to("meta"), cache=False)
    assert weight.is_meta and patcher._state.deltas == {}
    patcher.patched_weight(key)
    assert len(patcher._state.deltas) == 2


def test_a_dropped_model_is_not_kept_alive_by_the_mover(files: tuple[Path, Path, Path]) -> None:
    import gc
    import weakref

    ckpt, lora1, _ = files
    manager, mover, stack, module = _placed(ckpt, 1 << 40)
    stack.add(lora1, 0.8)
    manager.load_models([stack.patchers["diffusion_model"]]).raise_if_refused()
    manager.unload_all()
    ref = weakref.ref(module)
    del module, stack
    gc.collect()
    assert ref() is None and mover._placed == {}
