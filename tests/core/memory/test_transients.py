"""Every transient a streamed layer makes on the device is counted: stored + decoded values +
decode scratch (+ a LoRA bake), from measurement (``core.memory.transients``), within 15 % of
what ``bench/transients.py`` measures, and planning keeps room for it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.transients import measure
from core.loading.loader import load_diffusion_model
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import ModelState, PlanSettings, plan_load
from core.memory.transients import inflight_sizes
from tests.fixtures.gguf_quant import write_comfy_gguf
from tests.fixtures.tiny_models import TINY_FLUX


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "Q8_0", "Q4_K"])
def test_predicted_in_flight_bytes_are_within_15_percent_of_measured(fmt: str, lora: bool) -> None:
    # a weight large beside the bake's two 2 MiB host buffers (counted when first allocated)
    result = measure(fmt, 2048, 8192, torch.bfloat16, lora)
    assert 0.85 <= result["measured_over_predicted"] <= 1.15, result


def test_a_streamed_gguf_model_is_planned_with_its_decode_in_flight(tmp_path: Path) -> None:
    path = write_comfy_gguf(tmp_path / "flux.gguf", "flux", TINY_FLUX.file_state(), "Q8_0")[0]
    module = load_diffusion_model(path).module
    sizes = dict(inflight_sizes(module))
    stored = {n: sum(t.nbytes for t in m.parameters(recurse=False)) for n, m in module.named_modules()}
    assert sizes and all(sizes[n] > stored[n] for n in sizes)  # quantized layers decode on the device
    settings = PlanSettings(vram_state="normal", reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: 1 << 30, TorchMover(), settings=settings, device="cpu")
    state = manager.register(module, "flux").state()
    assert all(state.flight[n] == sizes[n] for n in sizes)  # what planning keeps room for


def test_planning_keeps_room_for_the_decode_in_flight() -> None:
    """Four 100-byte modules, all streamed; "a" decodes into 250 bytes on the device: two
    modules in flight need 350 bytes, not the 200 their stored bytes say."""
    sizes = (("a", 100), ("b", 100), ("c", 100), ("d", 100))
    model = ModelState("m", 400, module_sizes=sizes, inflight=(("a", 250),))
    cfg = PlanSettings(vram_state="no_vram", reserve_bytes=0, min_inference_bytes=0)
    plan = plan_load(model, 360, 0, cfg)
    assert plan.kind == "partial_load" and plan.buffer_bytes == 350 and plan.device_bytes == 0
    assert plan_load(model, 300, 0, cfg).kind == "refuse"  # 200 stored bytes would have "fitted"
    plain = ModelState("m", 400, module_sizes=sizes)
    assert plan_load(plain, 300, 0, cfg).buffer_bytes == 200
