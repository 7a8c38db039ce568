"""fp8 weights computed upcast (and multiplied in fp8 where possible)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.models.flux import Flux
from core.ops.fp8 import (
    E4M3_MAX,
    Fp8Linear,
    device_has_fp8_matmul,
    fp8_matmul_ops,
    fp8_matmul_rule,
    scaled_mm_blocker,
    scaled_mm_linear,
)
from core.ops.layers import CastWeights
from core.ops.streaming import patch_fn_from, stream_layers, unstream_layers
from core.patching.patcher import ModelPatcher
from core.quant.fp8_weight import ScaledFp8Weight
from tests.core.ops import MODELS, assert_untouched, lora_patches, one_thread, op_layers, snapshot

__all__ = ["one_thread"]  # the autouse fixture, imported so it applies here

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]


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


# -- a model built from the fp8 matmul op set ----------------------------------------------------

E4M3 = torch.float8_e4m3fn


def test_a_model_builds_from_the_fp8_matmul_ops_and_runs() -> None:
    tiny = MODELS["flux"]
    module = Flux(tiny.config, ops=fp8_matmul_ops, device="cpu")
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
