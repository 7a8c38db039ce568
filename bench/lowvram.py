"""Benchmark: a UNet forward with 100 / 50 / 25 % of its weights resident, the rest streamed.

Target (issue 5, on a GPU): streamed time <= 1.25 x max(compute time, transfer time of the
streamed bytes), where compute time is the all-resident forward and transfer time is the streamed
bytes over the pinned host->device bandwidth measured in the same run.

On a machine without CUDA it runs the same machinery on the CPU (``--device cpu``) with a smaller
UNet, so the code path is exercised; those figures say nothing about PCIe and are labelled so.
Prints one JSON object. ``python -m bench.lowvram [--device cuda] [--unet sdxl|sd1|small]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.models.unet import UNetConfig, UNetModel  # noqa: E402
from core.ops.streaming import stream_layers, streamable_layers, unstream_layers  # noqa: E402


def _config(name: str) -> UNetConfig:
    if name == "sdxl":
        return UNetConfig.sdxl()
    if name == "sd1":
        return UNetConfig.sd1()
    small = {"model_channels": 64, "num_res_blocks": (1, 1, 1, 1), "transformer_depth": (1, 1, 1, 0)}
    return replace(UNetConfig.sd1(), **small, transformer_depth_output=(0, 0, 1, 1, 1, 1, 1, 1))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn, device: str, repeat: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    _sync(device)
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def _pinned_bandwidth(device: str, nbytes: int = 256 << 20) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8)
    if device.startswith("cuda"):
        src = src.pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    seconds = _time(lambda: dst.copy_(src, non_blocking=True), device, 5)
    return nbytes / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--unet", choices=["sdxl", "sd1", "small"], default=None)
    ap.add_argument("--latent", type=int, default=None, help="latent side (default 128 on GPU, 16 on CPU)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    gpu = args.device.startswith("cuda")
    unet_name = args.unet or ("sdxl" if gpu else "small")
    cfg = _config(unet_name)
    dtype = torch.float16 if gpu else torch.float32
    model = UNetModel(cfg, device="cpu", dtype=dtype)
    g = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.data = (torch.randn(p.shape, generator=g) * 0.02).to(dtype)
    side = args.latent or (128 if gpu else 16)
    x = torch.randn(1, cfg.in_channels, side, side, dtype=dtype, device=args.device)
    t = torch.tensor([500.0], device=args.device, dtype=dtype)
    ctx = torch.randn(1, 77, cfg.context_dim or 768, dtype=dtype, device=args.device)
    y = torch.randn(1, cfg.adm_in_channels, dtype=dtype, device=args.device) if cfg.adm_in_channels else None
    layers = sorted(streamable_layers(model), key=lambda nb: -nb[1])
    total = sum(b for _, b in layers)
    bandwidth = _pinned_bandwidth(args.device)
    results = []
    orders = {"largest": layers, "smallest": layers[::-1]}
    with torch.inference_mode():
        for fraction, order in ((1.0, "largest"), (0.5, "largest"), (0.25, "largest"),
                                (0.5, "smallest"), (0.25, "smallest")):  # fmt: skip
            resident, budget = [], fraction * total
            for name, nbytes in orders[order]:  # "largest": largest first while they fit, as the planner does
                if nbytes <= budget:
                    resident.append(name)
                    budget -= nbytes
            rest = [n for n, _ in layers if n not in set(resident)]
            model.to(args.device)
            for name in rest:  # streamed layers keep their weights on the CPU
                model.get_submodule(name).to("cpu")
            streamed = stream_layers(model, rest, args.device, pin=gpu) if rest else None
            seconds = _time(lambda: model(x, t, ctx, y), args.device, args.repeat)
            # the host's share: how long the forward takes to *issue* (no sync); near ``seconds`` the
            # GPU waits for Python (per-layer overhead), well below it the GPU or the bus is the bound
            _sync(args.device)
            t0 = time.perf_counter()
            model(x, t, ctx, y)
            issue = time.perf_counter() - t0
            _sync(args.device)
            streamed_bytes = sum(b for n, b in layers if n in set(rest))
            if streamed is not None:
                unstream_layers(model, rest)
            results.append({"resident_fraction": fraction, "resident_first": order,
                            "seconds": round(seconds, 4), "issue_seconds": round(issue, 4),
                            "streamed_layers": len(rest), "streamed_bytes": streamed_bytes})  # fmt: skip
    compute = results[0]["seconds"]
    for r in results:
        transfer = r["streamed_bytes"] / bandwidth
        bound = max(compute, transfer)
        r["transfer_seconds"] = round(transfer, 4)
        r["ratio_vs_bound"] = round(r["seconds"] / bound, 3)
    print(json.dumps({
        "bench": "lowvram",
        "device": torch.cuda.get_device_name() if gpu else "cpu (code path only: no PCIe here)",
        "unet": unet_name, "dtype": str(dtype), "latent": side, "weights_bytes": total,
        "pinned_bandwidth_gb_s": round(bandwidth / 1e9, 2),
        "results": results,
        "target": "streamed seconds <= 1.25 x max(compute, transfer of streamed bytes) on a GPU",
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__},
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
