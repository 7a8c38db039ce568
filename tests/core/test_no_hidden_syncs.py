"""No forward makes the CPU wait for the card: no host-to-device copy but the streamed weights'
own, no scalar read, whatever the placement (resident, streamed), weight format (fp16, GGUF, scaled
fp8) and with a LoRA on it.

How it is proven without a GPU: the real mover places the model on the ``meta`` device (shapes
only: nothing is computed, so a forward takes milliseconds) and ``tests.fixtures.sync_trace``
records every host-to-device copy and scalar read inside the forward (see its docstring for why a
``TorchDispatchMode`` and a ``TorchFunctionMode`` are both needed). Copies of a streamed layer's
stored weight and bias are the streaming itself and are allowed; anything else -- a LoRA factor,
an fp8 scale, a GGUF shift table, a norm's scale left in host memory -- fails, with what it was.
On a GPU, ``scripts/gpu-check`` runs the same forwards under ``torch.cuda.set_sync_debug_mode``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from core.loading.loader import load_diffusion_model
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.patching.patcher import ModelPatcher
from core.patching.side import LoraSidePath, set_side_outputs
from core.quant.dequant import BLOCK_DEQUANT, dequantize
from core.quant.gguf_types import BY_NAME
from tests.core.ops import lora_patches, op_layers
from tests.fixtures.fp8_scaled import write_scaled_fp8
from tests.fixtures.gguf_quant import write_comfy_gguf
from tests.fixtures.placing import room_to_stream
from tests.fixtures.sync_trace import HostSyncTrace
from tests.fixtures.tiny_models import FORWARD, TINY_FLUX, TINY_PIXART, TINY_UNET_SD1, Tiny

FORMATS = ("fp16", "gguf", "fp8")


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _write(d: Path, tiny: Tiny, fmt: str) -> Path:
    if fmt == "gguf":
        return write_comfy_gguf(d / f"{tiny.name}.gguf", "flux", tiny.file_state(), "Q8_0")[0]
    path = d / f"{tiny.name}-{fmt}.safetensors"
    if fmt == "fp8":
        write_scaled_fp8(path, tiny.file_state())
    else:
        save_file({k: v.half().contiguous() for k, v in tiny.file_state().items()}, path)
    return path


def _placed(
    path: Path, fraction: float, lora_seed: int | None
) -> tuple[nn.Module, TorchMover, MemoryManager, ModelPatcher]:
    module = load_diffusion_model(path).module
    patcher = ModelPatcher(module)
    if lora_seed is not None:
        patcher.add_patches("lora", lora_patches(module, op_layers(module)[::3], lora_seed))
    mover = TorchMover()
    mover.use_patcher(patcher)
    state, free = room_to_stream(module, fraction)
    settings = PlanSettings(vram_state=state, reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: free, mover, settings=settings, device="meta")
    manager.register(patcher, "model")
    manager.load_models([patcher]).raise_if_refused()
    return module, mover, manager, patcher


def _meta_forward(tiny: Tiny, module: nn.Module, trace: HostSyncTrace | None = None) -> None:
    """The tiny network's seeded forward with its inputs on ``meta`` (their copies are allowed:
    a sampler hands the model inputs already on the device)."""
    real_to = FORWARD[tiny.architecture.name]

    class OnMeta(nn.Module):  # moves the inputs the fixture makes on the CPU to the device
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def __call__(self, *args: object) -> object:  # type: ignore[override]
            if trace is not None:
                trace.allow(a for a in args if isinstance(a, torch.Tensor))
            moved = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
            return module(*moved)

    with torch.no_grad():
        real_to(OnMeta(), tiny.config)  # type: ignore[arg-type]


def _trace(
    tiny: Tiny, module: nn.Module, mover: TorchMover, manager: MemoryManager, patcher: ModelPatcher
) -> HostSyncTrace:
    entry = manager.find(patcher)
    assert entry is not None
    streamed = mover.stats(entry)
    trace = HostSyncTrace("meta")
    if streamed is not None:
        trace.allow(t for s in streamed.layers.values() for t in (s.weight, s.bias))
    _meta_forward(tiny, module)  # a first forward learns the order (prefetch) and warms caches
    with trace:
        _meta_forward(tiny, module, trace)
    return trace


CASES = [(TINY_FLUX, fmt) for fmt in FORMATS] + [(TINY_UNET_SD1, "fp16"), (TINY_PIXART, "fp16")]


@pytest.mark.parametrize("placement", ["resident", "streamed"])
@pytest.mark.parametrize(("tiny", "fmt"), CASES, ids=[f"{t.name}-{f}" for t, f in CASES])
def test_a_forward_copies_nothing_from_the_host_but_streamed_weights(
    tmp_path: Path, tiny: Tiny, fmt: str, placement: str
) -> None:
    path = _write(tmp_path, tiny, fmt)
    module, mover, manager, patcher = _placed(path, 4.0 if placement == "resident" else 0.4, lora_seed=1)
    entry = manager.find(patcher)
    assert entry is not None and entry.streaming == (placement == "streamed")
    trace = _trace(tiny, module, mover, manager, patcher)
    assert not trace.findings, trace.summary()
    assert trace.allowed_copies > 0  # the inputs, and the streamed weights


def test_the_first_forward_after_placement_is_already_clean(tmp_path: Path) -> None:
    """Factors and scales go to the device when the model is placed, not on first use."""
    module, mover, manager, patcher = _placed(_write(tmp_path, TINY_FLUX, "fp8"), 0.4, lora_seed=2)
    entry = manager.find(patcher)
    streamed = mover.stats(entry) if entry is not None else None
    assert streamed is not None
    trace = HostSyncTrace("meta")
    trace.allow(t for s in streamed.layers.values() for t in (s.weight, s.bias))
    with trace:
        _meta_forward(TINY_FLUX, module, trace)
    assert not trace.findings, trace.summary()


@pytest.mark.parametrize("qtype", sorted(BLOCK_DEQUANT))
def test_dequantizing_on_the_device_builds_its_constants_there(qtype: str) -> None:
    """The GGUF bit-shift tables were ``torch.tensor(list, device=...)``: a host copy per layer."""
    spec = BY_NAME[qtype]
    raw = torch.empty(spec.nbytes(spec.block * 4), dtype=torch.uint8, device="meta")
    trace = HostSyncTrace("meta")
    with trace:
        out = dequantize(raw, qtype, (4, spec.block), torch.bfloat16, "meta")
    assert out.shape == (4, spec.block) and out.dtype == torch.bfloat16
    assert not trace.findings, trace.summary()


def test_a_side_path_copies_its_factors_once(tmp_path: Path) -> None:
    """A LoRA running unbaked beside the weight (while a slider moves) copies its factors on its
    first forward on a device, never again."""
    module, mover, manager, patcher = _placed(_write(tmp_path, TINY_FLUX, "fp16"), 4.0, lora_seed=None)
    adapters = lora_patches(module, op_layers(module)[::4], 3, bias_diffs=False)
    sides = {
        key.removesuffix(".weight"): (LoraSidePath(kp[0].adapter, 0.5),)  # type: ignore[arg-type]
        for key, kp in adapters.items()
        if module.get_submodule(key.removesuffix(".weight")).weight.ndim == 2
    }
    set_side_outputs(module, sides)
    trace = _trace(TINY_FLUX, module, mover, manager, patcher)
    assert not trace.findings, trace.summary()


def test_the_tracer_sees_what_it_must() -> None:
    """The stand-in itself: a host copy, a factory from host data and a scalar read are caught."""
    trace = HostSyncTrace("meta")
    x = torch.ones(3, device="meta")
    with trace:
        _ = x + torch.ones(3).to("meta")
        _ = torch.tensor([1, 2], device="meta")
        with contextlib.suppress(RuntimeError, NotImplementedError):
            bool(x.sum() > 0)  # meta has no values: the read fails there, recorded before it does
    kinds = [f.kind for f in trace.findings]
    assert kinds == ["host_to_device", "factory_from_host", "scalar_read"], kinds


def test_the_factors_placed_on_the_device_are_counted_in_the_plan(tmp_path: Path) -> None:
    """The LoRA factors copied to the device with the weights are asked for as room: the plan's
    reserve grows by their bytes (each adapter once)."""
    from core.session.placement import Placement, PlacementConfig

    module = load_diffusion_model(_write(tmp_path, TINY_FLUX, "fp16")).module
    patcher = ModelPatcher(module)
    patches = lora_patches(module, op_layers(module)[::3], 1)
    patcher.add_patches("lora", patches)
    factors = sum(kp.adapter.factor_bytes() for kps in patches.values() for kp in kps)
    placement = Placement(None, PlacementConfig(simulate_bytes=1 << 30, inference_bytes=0))
    placement.register(patcher, "flux")
    assert placement.mover.factor_bytes(patcher) == factors > 0
    result = placement.place([patcher], memory_required=1000)
    (load,) = [e for e in result.events if e.kind == "load"]
    assert load.details["reserve_bytes"] == 1000 + factors
