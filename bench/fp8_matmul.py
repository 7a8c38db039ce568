"""Check and benchmark (GPU with fp8 matmul: NVIDIA CC >= 8.9): the real ``torch._scaled_mm`` path.

1. Layers: Flux-sized Linear weights (bf16, quantized to e4m3fn with a per-tensor scale) through
   :class:`Fp8Linear` against ``F.linear`` on the same dequantized weight in bf16: the relative
   error of the fp8-quantized input, every call counted on the real ``torch._scaled_mm``, and the
   time of each (the speedup fp8 matmul is for).
2. A model: a Flux-shaped network (every Linear side divisible by 16) written as a bf16 file and
   run by ``loadout run``'s code with the fp8 override and without: ``_scaled_mm`` calls per step
   equal its Linear layers, the latent stays bf16, the dtype event's reason, both s/step, and how
   far the outputs are apart.

Without a card that has fp8 matmul it prints ``{"skipped": why}`` and exits 0. ``--rehearse``
runs everything on the CPU (whose torch build runs ``_scaled_mm`` too) with the card's fp8
ability stood in for, so the check itself is tested anywhere; its timings say nothing.
Exit status 1 when a check fails. ``python -m bench.fp8_matmul [--quick] [--rehearse]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import core.session.dtype_choice as dtype_choice  # noqa: E402
from core.loading.architectures import FLUX  # noqa: E402
from core.memory.devices import nvidia_device  # noqa: E402
from core.memory.policy import MemorySettings, VramState  # noqa: E402
from core.models.flux import FluxConfig  # noqa: E402
from core.ops import fp8 as fp8_ops  # noqa: E402
from core.ops.fp8 import Fp8Linear  # noqa: E402
from core.quant.fp8_weight import quantize_e4m3fn  # noqa: E402
from core.run.command import RunRequest, run_headless  # noqa: E402
from core.session.testrun import RunConfig  # noqa: E402
from tests.fixtures.st_files import write_tensors  # noqa: E402
from tests.fixtures.tiny_models import random_state  # noqa: E402

BF16 = torch.bfloat16
#: the input's quantization to e4m3 (3 mantissa bits) moves a layer's output by a few percent
MAX_RELATIVE_ERROR = 0.08


class Counted:
    """The real ``torch._scaled_mm``, counting its calls and the dtypes it writes."""

    def __init__(self, real: Callable[..., Any]) -> None:
        self.real = real
        self.out_dtypes: list[torch.dtype] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.out_dtypes.append(kwargs["out_dtype"])
        return self.real(*args, **kwargs)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn: Callable[[], object], device: torch.device, repeat: int) -> float:
    fn()
    _sync(device)
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def _queued(fn: Callable[[], object], device: torch.device, calls: int = 20) -> float:
    """Seconds per call with ``calls`` calls queued before one sync: the GPU's own pace, without the
    per-call launch and Python time a sync after each call adds (which dominates a 0.1 ms layer)."""
    fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / calls


def _kernels(fn: Callable[[], object], device: torch.device) -> list[str]:
    """The device kernels one call runs, with their time (CUDA only): what the fp8 path adds."""
    if device.type != "cuda":
        return []
    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        _sync(device)
    rows = sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total", 0.0))
    return [
        f"{e.key[:90]}: {getattr(e, 'device_time_total', 0.0) / 5:.1f} us x{e.count // 5}" for e in rows[:8]
    ]


def _layer(rows: int, cols: int, tokens: int, device: torch.device, gen: torch.Generator) -> Any:
    weight = (torch.randn(rows, cols, generator=gen) / cols**0.5).to(BF16)
    layer = Fp8Linear(cols, rows, bias=True, device="meta")
    layer.weight = torch.nn.Parameter(quantize_e4m3fn(weight).to(device), requires_grad=False)
    layer.bias = torch.nn.Parameter(torch.zeros(rows, dtype=BF16, device=device), requires_grad=False)
    x = torch.randn(tokens, cols, generator=gen).to(device, BF16)
    return layer, x


def layers(device: torch.device, tokens: int, repeat: int, counted: Counted) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for rows, cols in ((3072, 3072), (12288, 3072), (3072, 12288)):
        layer, x = _layer(rows, cols, tokens, device, gen)
        dequantized = layer.weight.to(BF16)  # the same weight, upcast: only the input is quantized extra
        before = len(counted.out_dtypes)
        with torch.no_grad():
            got = layer(x)
            want = F.linear(x, dequantized, layer.bias)
            error = float((got.float() - want.float()).norm() / want.float().norm())
            fp8_s = _time(partial(layer, x), device, repeat)
            bf16_s = _time(partial(F.linear, x, dequantized, layer.bias), device, repeat)
            calls = len(counted.out_dtypes) - before
            fp8_q = _queued(partial(layer, x), device, 20 if device.type == "cuda" else 2)
            bf16_q = _queued(
                partial(F.linear, x, dequantized, layer.bias), device, 20 if device.type == "cuda" else 2
            )
            kernels = _kernels(partial(layer, x), device) if (rows, cols) == (3072, 3072) else []
        out.append({
            "shape": [rows, cols], "tokens": tokens, "scaled_mm_calls": calls,
            "relative_error": round(error, 4),
            "fp8_ms": round(fp8_s * 1e3, 3), "bf16_ms": round(bf16_s * 1e3, 3),
            "speedup": round(bf16_s / fp8_s, 2) if fp8_s > 0 else None,
            "fp8_ms_queued": round(fp8_q * 1e3, 3), "bf16_ms_queued": round(bf16_q * 1e3, 3),
            "speedup_queued": round(bf16_q / fp8_q, 2) if fp8_q > 0 else None,
            **({"fp8_kernels": kernels} if kernels else {}),
        })  # fmt: skip
    return out


def _flux(quick: bool) -> FluxConfig:
    hidden = 256 if quick else 1536
    return FluxConfig(
        in_channels=64, out_channels=64, vec_in_dim=768, context_in_dim=1024 if quick else 4096,
        hidden_size=hidden, num_heads=hidden // 128, depth=2, depth_single_blocks=4,
        axes_dim=(16, 56, 56),
    )  # fmt: skip


def model(device: torch.device, quick: bool, counted: Counted, folder: Path) -> dict[str, Any]:
    config = _flux(quick)
    state = {k: v.to(BF16) for k, v in random_state(FLUX.build(config, "meta", None), 0).items()}
    path = write_tensors(folder / "flux-shaped-bf16.safetensors", state)
    steps, size = 3, 256 if quick else 1024
    settings = MemorySettings(vram_state=VramState.NORMAL_VRAM)

    def run(dtype: torch.dtype) -> Any:
        config = RunConfig(steps=steps, width=size, height=size, dtype=dtype)
        request = RunRequest(path, config=config, device=str(device), settings=settings)
        return run_headless(request)

    plain = run(BF16)
    before = len(counted.out_dtypes)
    fast = run(torch.float8_e4m3fn)
    calls = counted.out_dtypes[before:]
    linear = sum(1 for k, v in state.items() if k.endswith(".weight") and v.ndim == 2)
    reasons = [e.reason for e in fast.events if e.kind == "dtype"]
    a, b = float(plain.output["abs_sum"]), float(fast.output["abs_sum"])
    return {
        "linear_layers": linear, "steps": steps, "size": size, "scaled_mm_calls": len(calls),
        "out_dtypes": sorted({str(d).removeprefix("torch.") for d in calls}), "run_dtype": fast.dtype,
        "bf16_s_per_step": plain.seconds_per_step, "fp8_s_per_step": fast.seconds_per_step,
        "abs_sum_relative_difference": round(abs(a - b) / max(a, 1e-12), 4), "reason": reasons,
    }  # fmt: skip


def _failures(result: dict[str, Any]) -> list[str]:
    bad = []
    for row in result["layers"]:
        if row["scaled_mm_calls"] < 1:
            bad.append(f"{row['shape']}: Fp8Linear did not call torch._scaled_mm")
        if row["relative_error"] > MAX_RELATIVE_ERROR:
            bad.append(f"{row['shape']}: relative error {row['relative_error']} > {MAX_RELATIVE_ERROR}")
    m = result["model"]
    if m["scaled_mm_calls"] != m["steps"] * m["linear_layers"]:
        bad.append(
            f"model: {m['scaled_mm_calls']} _scaled_mm calls, wanted {m['steps']} x {m['linear_layers']}"
        )
    if m["out_dtypes"] != ["bfloat16"] or m["run_dtype"] != "bfloat16":
        bad.append(f"model: activations in {m['out_dtypes']} / {m['run_dtype']}, wanted bfloat16")
    if len(m["reason"]) != 1 or "fp8_e4m3fn" not in m["reason"][0]:
        bad.append(f"model: the dtype event says {m['reason']}")
    return bad


def _stand_in() -> None:
    """The CPU rehearsal: the card's fp8 matmul and the device the dtype decision is made for."""
    card = nvidia_device(0, "stand-in for an RTX 4090 (CPU rehearsal)", 24 << 30, (8, 9))
    fp8_ops.device_has_fp8_matmul = lambda device: True
    dtype_choice.decision_device = lambda placement: card


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes and fewer repeats")
    ap.add_argument("--rehearse", action="store_true", help="on the CPU, the card stood in for")
    ns = ap.parse_args(argv)
    device = torch.device("cpu" if ns.rehearse else "cuda")
    if ns.rehearse:
        _stand_in()
    elif not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return 0
    elif not fp8_ops.device_has_fp8_matmul(device):
        p = torch.cuda.get_device_properties(device)
        why = f"{p.name} (CC {p.major}.{p.minor}) has no fp8 matmul (NVIDIA CC 8.9+, AMD gfx950/gfx12)"
        print(json.dumps({"skipped": why}))
        return 0
    counted = Counted(torch._scaled_mm)
    torch._scaled_mm = counted
    quick = ns.quick or ns.rehearse
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {
            "device": "cpu (rehearsal)" if ns.rehearse else torch.cuda.get_device_name(device),
            "layers": layers(device, 256 if quick else 4096, 2 if quick else 20, counted),
            "model": model(device, quick, counted, Path(tmp)),
        }
    result["failures"] = _failures(result)
    print(json.dumps(result, indent=1))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
