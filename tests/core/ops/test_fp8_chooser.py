"""fp8 weights computed upcast (and multiplied in fp8 where possible), and the op-set chooser."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.errors import LoadoutError
from core.memory.devices import DeviceInfo, cpu_device, mps_device, nvidia_device, rocm_device
from core.models.flux import Flux
from core.ops import default_ops
from core.ops.chooser import ChosenOps, choose_ops
from core.ops.fp8 import (
    E4M3_MAX,
    Fp8Linear,
    device_has_fp8_matmul,
    fp8_matmul_ops,
    fp8_matmul_rule,
    scaled_mm_blocker,
    scaled_mm_linear,
)
from core.ops.layers import CastWeights, Linear, OpSet
from core.ops.streaming import patch_fn_from, stream_layers, unstream_layers
from core.patching.patcher import ModelPatcher
from core.quant.fp8_weight import ScaledFp8Weight
from tests.core.ops import MODELS, assert_untouched, lora_patches, one_thread, op_layers, snapshot

__all__ = ["one_thread"]  # the autouse fixture, imported so it applies here

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
GIB = 1 << 30


def _store_fp8(module: nn.Module, dtype: torch.dtype) -> None:
    """Every op layer's weight and bias stored in ``dtype`` (the rest of the network stays fp32)."""
    for layer in module.modules():
        if isinstance(layer, CastWeights):
            for p in layer.parameters(recurse=False):
                p.data = p.data.to(dtype)


def _upcast_copy(module: nn.Module, dtype: torch.dtype, ref: nn.Module) -> None:
    """``ref`` given the fp8-rounded values of ``module``'s fp8 parameters, in fp32."""
    with torch.no_grad():
        for key, p in module.named_parameters():
            if p.dtype == dtype:
                ref.get_parameter(key).copy_(p.float())


# -- fp8 storage, upcast compute ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", FP8, ids=["e4m3fn", "e5m2"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_fp8_weights_compute_as_their_upcast_values(model: str, dtype: torch.dtype) -> None:
    tiny = MODELS[model]
    fp8, upcast = tiny.reference(), tiny.reference()
    _store_fp8(fp8, dtype)
    _upcast_copy(fp8, dtype, upcast)
    before = snapshot(fp8)
    out = tiny.forward(fp8)[0]
    assert torch.equal(out, tiny.forward(upcast)[0])
    assert_untouched(fp8, before)  # still fp8, same storage
    assert not torch.equal(out, tiny.forward(tiny.reference())[0])  # fp8 rounding is visible


@pytest.mark.parametrize("dtype", FP8, ids=["e4m3fn", "e5m2"])
def test_a_lora_on_streamed_fp8_weights_keeps_its_effect(dtype: torch.dtype) -> None:
    """A LoRA patched onto fp8 weights and rounded back to fp8 loses part of its effect (peers report
    Flux LoRAs on fp8 losing effect in lowvram); here the fp8 copy is upcast before the patch, so the
    result equals the LoRA baked onto the upcast weights, bit for bit."""
    tiny = MODELS["flux"]
    fp8, upcast = tiny.reference(), tiny.reference()
    _store_fp8(fp8, dtype)
    _upcast_copy(fp8, dtype, upcast)
    names = op_layers(fp8)
    patches = lora_patches(upcast, names, seed=2, scale=0.02)  # a gentle LoRA

    reference = ModelPatcher(upcast)
    reference.add_patches("lora", patches)
    plain = tiny.forward(upcast)[0]
    reference.apply()
    wanted = tiny.forward(upcast)[0]
    assert not torch.equal(wanted, plain)

    patcher = ModelPatcher(fp8)
    patcher.add_patches("lora", patches)
    stream_layers(fp8, names, "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
    assert torch.equal(tiny.forward(fp8)[0], wanted)

    # Baked (apply()) gives the same bits: the fp8 bytes stay, the patch runs on the upcast weight.
    unstream_layers(fp8, names)
    patcher.apply()
    assert torch.equal(tiny.forward(fp8)[0], wanted)
    for name in names:
        w = fp8.get_submodule(name).weight
        assert isinstance(w, ScaledFp8Weight) and w.dtype == dtype and w.patch is not None

    # What that avoids: the same LoRA rounded back into fp8 weights loses part of its effect.
    for name in names:
        layer = fp8.get_submodule(name)
        layer.weight = nn.Parameter(layer.weight.materialize(torch.float32).to(dtype), requires_grad=False)
    rounded = tiny.forward(fp8)[0]
    effect = (wanted - plain).norm()
    assert (rounded - wanted).norm() > 0.1 * effect  # off by a tenth of the LoRA's effect or more


# -- fp8 matmul ---------------------------------------------------------------------------------


def _linear_case(rows: tuple[int, ...], seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*rows, 32, generator=g) * 3
    w = (torch.randn(48, 32, generator=g) / 4).to(torch.float8_e4m3fn)
    b = torch.randn(48, generator=g)
    return x, w, b


def test_fp8_linear_upcasts_where_fp8_matmul_is_missing() -> None:
    x, w, b = _linear_case((3, 5))
    layer = Fp8Linear(32, 48)
    layer.weight = nn.Parameter(w, requires_grad=False)
    layer.bias = nn.Parameter(b, requires_grad=False)
    with torch.no_grad():
        assert torch.equal(layer(x), F.linear(x, w.float(), b))
    assert layer.weight.dtype == torch.float8_e4m3fn
    assert not device_has_fp8_matmul(torch.device("cpu"))


@pytest.mark.parametrize("rows", [(16,), (5,), (2, 7)], ids=["aligned", "padded", "3d"])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_scaled_mm_linear_is_linear_of_the_quantized_input(
    rows: tuple[int, ...], out_dtype: torch.dtype, with_bias: bool
) -> None:
    x, w, b = _linear_case(rows)
    x.view(-1)[0] = 1000.0  # beyond e4m3's range: clamped in the copy, not in x
    x = x.to(out_dtype)
    bias = b if with_bias else None
    try:
        out = scaled_mm_linear(x, w, bias)
    except (NotImplementedError, RuntimeError) as exc:  # torch builds without a CPU _scaled_mm
        pytest.skip(f"torch._scaled_mm does not run on this CPU build: {exc}")
    q = x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()
    want = F.linear(q, w.float(), bias)
    assert out.shape == (*rows, 48) and out.dtype == out_dtype
    tol = 1e-5 if out_dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), want, rtol=tol, atol=tol * 4)
    assert x.view(-1)[0] == 1000.0


def test_scaled_mm_blockers() -> None:
    x, w, _ = _linear_case((4,))
    assert scaled_mm_blocker(x, w) is None
    assert "e4m3fn" in (scaled_mm_blocker(x, w.to(torch.float8_e5m2)) or "")
    assert "divisible by 16" in (scaled_mm_blocker(x[:, :8], w[:, :8]) or "")
    assert "fp16, bf16 or fp32" in (scaled_mm_blocker(x.double(), w) or "")
    assert "features" in (scaled_mm_blocker(torch.randn(4, 16), w) or "")


@pytest.mark.parametrize(
    ("kind", "capability", "arch", "expected"),
    [
        ("cuda", (8, 9), None, True),
        ("cuda", (9, 0), None, True),
        ("cuda", (12, 0), None, True),
        ("cuda", (8, 6), None, False),
        ("rocm", None, "gfx942:sramecc+:xnack-", False),
        ("rocm", None, "gfx950", True),
        ("rocm", None, "gfx1201", True),
        ("mps", None, None, False),
        ("cpu", None, None, False),
    ],
)
def test_fp8_matmul_rule(
    kind: str, capability: tuple[int, int] | None, arch: str | None, expected: bool
) -> None:
    assert fp8_matmul_rule(kind, capability, arch) is expected


# -- the chooser --------------------------------------------------------------------------------

RTX_4090 = nvidia_device(0, "NVIDIA GeForce RTX 4090", 24 * GIB, (8, 9))
RTX_3090 = nvidia_device(0, "NVIDIA GeForce RTX 3090", 24 * GIB, (8, 6))
GTX_1660 = nvidia_device(0, "NVIDIA GeForce GTX 1660 SUPER", 6 * GIB, (7, 5))
MI300 = rocm_device(0, "AMD Instinct MI300X", 192 * GIB, "gfx942")
MI355 = rocm_device(0, "AMD Instinct MI355X", 288 * GIB, "gfx950")
MAC = mps_device(32 * GIB, (14, 5))
CPU = cpu_device(64 * GIB)
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16

CHOICES = [
    # weight, compute, device -> op set, Linear class, activation dtype, a phrase of the reason
    (E4M3, E4M3, RTX_4090, "fp8_scaled_mm", Fp8Linear, BF16, "torch._scaled_mm"),
    (E4M3, E4M3, MI355, "fp8_scaled_mm", Fp8Linear, BF16, "gfx950"),
    (E4M3, E4M3, RTX_3090, "fp8_upcast", Linear, BF16, "CC 8.9"),
    (E4M3, E4M3, MI300, "fp8_upcast", Linear, BF16, "has none"),
    (E4M3, E4M3, GTX_1660, "fp8_upcast", Linear, FP32, "has none"),
    (E5M2, E4M3, RTX_4090, "fp8_upcast", Linear, BF16, "these are float8_e5m2"),
    (BF16, E4M3, RTX_4090, "manual_cast", Linear, BF16, "these are bf16"),
    (E4M3, BF16, RTX_4090, "fp8_upcast", Linear, BF16, "opt-in"),
    (E5M2, FP16, RTX_3090, "fp8_upcast", Linear, FP16, "upcast to fp16"),
    (E4M3, FP32, CPU, "fp8_upcast", Linear, FP32, "half of 16-bit memory"),
    (BF16, BF16, RTX_3090, "native", Linear, BF16, "already bf16"),
    (FP16, FP32, CPU, "manual_cast", Linear, FP32, "cast to fp32"),
    (FP16, FP16, GTX_1660, "native", Linear, FP16, "NaNs"),
    (FP16, FP16, MAC, "native", Linear, FP16, "no cast"),
]


@pytest.mark.parametrize(("weight", "compute", "device", "name", "linear", "activation", "phrase"), CHOICES)
def test_choose_ops_for_simulated_devices(
    weight: torch.dtype,
    compute: torch.dtype,
    device: DeviceInfo,
    name: str,
    linear: type[nn.Linear],
    activation: torch.dtype,
    phrase: str,
) -> None:
    chosen = choose_ops(weight, compute, device)
    assert isinstance(chosen, OpSet) and isinstance(chosen, ChosenOps)
    assert chosen.name == name
    assert chosen.Linear is linear
    assert chosen.Conv2d is default_ops.Conv2d and chosen.GroupNorm is default_ops.GroupNorm
    assert chosen.activation_dtype == activation
    assert chosen.reasons and any(phrase in r for r in chosen.reasons), chosen.reasons


def test_choose_ops_refuses_what_cannot_run() -> None:
    with pytest.raises(LoadoutError, match="cannot hold"):
        choose_ops(E4M3, FP16, MAC)
    with pytest.raises(LoadoutError, match="cannot compute"):
        choose_ops(FP16, torch.int8, RTX_4090)


def test_a_model_builds_from_the_chosen_ops_and_runs() -> None:
    tiny = MODELS["flux"]
    chosen = choose_ops(E4M3, E4M3, RTX_4090)
    assert chosen.Linear is fp8_matmul_ops.Linear
    module = Flux(tiny.config, ops=chosen, device="cpu")
    module.load_state_dict(tiny.state())
    _store_fp8(module, E4M3)
    assert sum(isinstance(m, Fp8Linear) for m in module.modules()) > 10
    out = tiny.forward(module)[0]  # no fp8 matmul on the CPU: every Fp8Linear upcasts
    upcast = tiny.reference()
    _upcast_copy(module, E4M3, upcast)
    assert torch.equal(out, tiny.forward(upcast)[0])


@pytest.mark.gpu
def test_cuda_fp8_matmul_is_close_to_upcast() -> None:
    device = torch.device("cuda")
    if not device_has_fp8_matmul(device):
        pytest.skip("this GPU has no fp8 matmul")
    x, w, b = _linear_case((64,))
    layer = Fp8Linear(32, 48, device=device)
    layer.weight = nn.Parameter(w.to(device), requires_grad=False)
    layer.bias = nn.Parameter(b.to(device).bfloat16(), requires_grad=False)
    xb = x.to(device, torch.bfloat16)
    with torch.no_grad():
        out = layer(xb)
        q = xb.float().clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).float()
        want = F.linear(q, w.to(device).float(), layer.bias.float())
    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=5e-2)
    assert layer.weight.dtype == E4M3
