"""fp8 matmul as a setting, end to end on a stand-in device: the diffusion model's compute override
``fp8_e4m3fn`` reaches the dtype policy at load, the network is built from ``fp8_matmul_ops``
(its 16-bit Linear weights quantized to e4m3fn with a per-tensor scale), every 16-divisible Linear
layer multiplies through ``torch._scaled_mm`` each step while the latent stays 16-bit, and without
the setting, or on a card without fp8 matmul, the default ops run and the reason says why.

No GPU here: the device's fp8 ability is stood in for (``device_has_fp8_matmul``, and the device
the dtype decision is made for), and ``torch._scaled_mm`` by a reference that dequantizes its
operands and multiplies, counting calls."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import core.session.dtype_choice as dtype_choice
from core.loading.architectures import FLUX
from core.memory.devices import DeviceInfo, nvidia_device
from core.memory.dtypes import DtypePolicy
from core.memory.policy import DtypeOverride, MemorySettings, VramState
from core.ops import fp8 as fp8_ops
from core.ops.fp8 import Fp8Linear, scaled_mm_blocker, use_fp8_matmul
from core.ops.layers import Linear
from core.quant.fp8_weight import ScaledFp8Weight, quantize_e4m3fn
from core.run.command import HeadlessReport, RunRequest, run_headless
from core.session import SlotId
from core.session.compose import headless_session, load_main
from core.session.dtype_choice import compute_override
from core.session.testrun import RunConfig
from tests.core.ops import one_thread
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import TINY_FLUX, random_state

__all__ = ["one_thread"]  # the autouse fixture, imported so it applies here

GIB = 1 << 30
RTX_4090 = nvidia_device(0, "NVIDIA GeForce RTX 4090", 24 * GIB, (8, 9))
RTX_3090 = nvidia_device(0, "NVIDIA GeForce RTX 3090", 24 * GIB, (8, 6))
NORMAL = MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0, min_inference_bytes=0)
FP8 = torch.float8_e4m3fn
STEPS = 2


#: the tiny Flux with every Linear side divisible by 16 (TINY_FLUX's text and vector widths are
#: 20 and 12), so every Linear layer can multiply in fp8
ALIGNED = replace(TINY_FLUX.config, vec_in_dim=16, context_in_dim=32)


@pytest.fixture(scope="module")
def flux_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = {k: v.to(torch.bfloat16) for k, v in random_state(FLUX.build(ALIGNED, "meta", None), 4).items()}
    return write_tensors(tmp_path_factory.mktemp("fp8") / "tiny-flux-dev.safetensors", state)


@dataclass(eq=False)  # hashable: torch's dynamo tables may look it up as a torch function
class ScaledMM:
    """``torch._scaled_mm`` as its definition: both operands dequantized, multiplied in fp32."""

    out_dtypes: list[torch.dtype] = field(default_factory=list)

    def __call__(self, a: Tensor, b: Tensor, *, scale_a: Tensor, scale_b: Tensor, **kw: Any) -> Tensor:
        assert a.dtype == FP8 and b.dtype == FP8
        out_dtype = kw["out_dtype"]
        self.out_dtypes.append(out_dtype)
        out = (a.float() * scale_a) @ (b.float() * scale_b)
        bias = kw.get("bias")
        if bias is not None:
            out = out + bias.float()
        return out.to(out_dtype)


@pytest.fixture
def card(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ScaledMM, list[DeviceInfo]]]:
    """An fp8-capable card stood in for (the device list's first entry is the one decided for)."""
    mm = ScaledMM()
    devices = [RTX_4090]
    monkeypatch.setattr(fp8_ops, "device_has_fp8_matmul", lambda device: True)
    monkeypatch.setattr(torch, "_scaled_mm", mm)
    monkeypatch.setattr(dtype_choice, "decision_device", lambda placement: devices[0])
    yield mm, devices


def _run(path: Path, dtype: torch.dtype, *, streamed: bool = False) -> HeadlessReport:
    config = RunConfig(steps=STEPS, width=64, height=64, dtype=dtype)
    if streamed:  # a simulated card in no-VRAM mode: every layer streams (lowvram's path)
        settings = MemorySettings(vram_state=VramState.NO_VRAM, reserve_bytes=0, min_inference_bytes=0)
        return run_headless(RunRequest(path, config=config, settings=settings, vram_limit=64 << 20))
    return run_headless(RunRequest(path, config=config, settings=NORMAL))


def _fp8_layers(module: nn.Module) -> list[Fp8Linear]:
    return [m for m in module.modules() if isinstance(m, Fp8Linear)]


def test_the_setting_builds_fp8_linear_layers_that_multiply_in_fp8_each_step(
    flux_file: Path, card: tuple[ScaledMM, list[DeviceInfo]]
) -> None:
    mm, _ = card
    settings, dtype = compute_override(FP8, NORMAL)
    assert dtype is None and settings.override_for("diffusion_model") == DtypeOverride(
        "diffusion_model", compute="fp8_e4m3fn"
    )
    session, _ = headless_session("cpu", settings=settings)
    load_main(session, flux_file, lambda: None)
    module = session.component("diffusion_model")[0].module
    layers = _fp8_layers(module)
    assert len(layers) == sum(isinstance(m, nn.Linear) for m in module.modules()) > 10
    assert all(isinstance(m.weight, ScaledFp8Weight) and m.weight.dtype == FP8 for m in layers)
    others = [p for n, p in module.named_parameters() if not n.endswith(".weight") or p.ndim != 2]
    assert others and all(p.dtype == torch.bfloat16 for p in others)  # norms, biases: as stored
    choice = session.model(SlotId.MAIN).dtype_choice
    assert choice is not None and choice.compute == FP8 and choice.activation_dtype == torch.bfloat16
    assert "activations run in bf16" in choice.reason

    run = session.test_run(RunConfig(steps=STEPS, width=64, height=64), lambda s: None, lambda: None)
    assert run.dtype == "bf16" and set(mm.out_dtypes) == {torch.bfloat16}  # the window's test run
    mm.out_dtypes.clear()

    report = _run(flux_file, FP8)
    assert len(mm.out_dtypes) == STEPS * len(layers)  # every Linear layer, every step
    assert set(mm.out_dtypes) == {torch.bfloat16}  # activations 16-bit, never fp8
    assert report.dtype == "bfloat16"
    dtype_events = [e for e in report.events if e.kind == "dtype"]
    assert len(dtype_events) == 1 and "fp8_e4m3fn" in dtype_events[0].reason
    assert "quantized from bf16" in dtype_events[0].reason
    assert report.to_json()["events"][0]["kind"] == "dtype"  # the JSON report shows it too


def test_fp8_linear_layers_still_multiply_in_fp8_when_streamed(
    flux_file: Path, card: tuple[ScaledMM, list[DeviceInfo]]
) -> None:
    mm, _ = card
    resident = _run(flux_file, FP8)
    calls = len(mm.out_dtypes)
    mm.out_dtypes.clear()
    streamed = _run(flux_file, FP8, streamed=True)
    assert streamed.streamed_bytes_per_step > 0
    assert len(mm.out_dtypes) == calls
    assert streamed.output["sha256"] == resident.output["sha256"]


def test_without_the_setting_the_default_ops_run(
    flux_file: Path, card: tuple[ScaledMM, list[DeviceInfo]]
) -> None:
    mm, _ = card
    session, _ = headless_session("cpu", settings=NORMAL)
    load_main(session, flux_file, lambda: None)
    module = session.component("diffusion_model")[0].module
    assert not _fp8_layers(module) and session.model(SlotId.MAIN).dtype_choice is None
    report = _run(flux_file, torch.float32)
    assert mm.out_dtypes == [] and not [e for e in report.events if e.kind == "dtype"]


def test_a_card_without_fp8_matmul_keeps_the_default_ops_and_says_why(
    flux_file: Path, card: tuple[ScaledMM, list[DeviceInfo]]
) -> None:
    mm, devices = card
    devices[0] = RTX_3090
    report = _run(flux_file, FP8)
    assert mm.out_dtypes == []
    assert report.dtype == "bfloat16"  # the automatic 16-bit compute, not fp8
    (event,) = [e for e in report.events if e.kind == "dtype"]
    assert "needs fp8 matmul (NVIDIA CC 8.9+" in event.reason and "compute bf16" in event.reason
    session, _ = headless_session("cpu", settings=compute_override(FP8, NORMAL)[0])
    load_main(session, flux_file, lambda: None)
    assert not _fp8_layers(session.component("diffusion_model")[0].module)


def test_the_policy_names_the_activation_dtype_of_fp8_compute() -> None:
    settings = MemorySettings(dtype_overrides=(DtypeOverride("diffusion_model", compute="fp8_e4m3fn"),))
    policy = DtypePolicy()
    chosen = policy.storage_and_compute("diffusion_model", "flux-dev", "fp8_e4m3fn", RTX_4090, settings)
    assert (chosen.compute, chosen.storage, chosen.activation_dtype) == (FP8, FP8, torch.bfloat16)
    plain = policy.storage_and_compute("diffusion_model", "flux-dev", "bf16", RTX_4090)
    assert plain.activation is None and plain.activation_dtype == plain.compute == torch.bfloat16
    fallback = policy.storage_and_compute("diffusion_model", "flux-dev", "fp8_e4m3fn", RTX_3090, settings)
    assert fallback.compute == torch.bfloat16 and fallback.activation_dtype == torch.bfloat16


def test_layers_fp8_matmul_cannot_take_keep_their_weights_and_upcast() -> None:
    net = nn.Sequential(Linear(32, 48), Linear(48, 20), nn.LayerNorm(20)).to(torch.bfloat16)
    with torch.no_grad():  # the op layers skip initialisation
        for p in net.parameters():
            p.normal_(generator=torch.Generator().manual_seed(0))
    assert use_fp8_matmul(net) == (2, 1)  # both Linear layers switched, the 48x20 one not quantized
    assert isinstance(net[0], Fp8Linear) and net[0].weight.dtype == FP8
    assert isinstance(net[1], Fp8Linear) and net[1].weight.dtype == torch.bfloat16
    assert type(net[2]) is nn.LayerNorm
    with torch.no_grad():
        assert net(torch.randn(3, 32, dtype=torch.bfloat16)).dtype == torch.bfloat16  # upcast path


def test_quantizing_keeps_the_largest_value_and_saturates_nothing() -> None:
    w = torch.randn(32, 48, generator=torch.Generator().manual_seed(0)) * 900.0  # beyond e4m3's 448
    q = quantize_e4m3fn(w.to(torch.bfloat16))
    assert q.dtype == FP8 and not torch.isnan(q.plain().float()).any()
    values = q.to(torch.float32)
    assert torch.allclose(values, w, rtol=0.07, atol=float(w.abs().max()) / 448 * 0.5)
    assert scaled_mm_blocker(torch.randn(2, 48), q) is None


def test_on_the_cpu_the_fp8_setting_runs_in_fp32_and_says_why(flux_file: Path) -> None:
    report = _run(flux_file, FP8)  # no stand-in: this machine's CPU
    assert report.dtype == "float32"
    (event,) = [e for e in report.events if e.kind == "dtype"]
    assert "the CPU lacks" in event.reason and "compute fp32" in event.reason
