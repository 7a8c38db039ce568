"""Benchmark: a quantized GGUF diffusion model against the same network in fp16 safetensors.

One full-size SD1.5 UNet (860 M weights; seeded random values) is written three times: fp16
safetensors (the baseline), GGUF Q8_0 and GGUF Q4_K (as ComfyUI-GGUF lays them out: original keys,
``general.architecture = sd1``, conv kernels reshaped with ``comfy.gguf.orig_shape``; Q8_0 is
quantized by gguf-py, Q4_K blocks are random codes with small scales since gguf-py cannot quantize
K types -- the bytes and the work per weight are the real ones). Each is loaded with Loadout's
loader and run for ``--steps`` UNet calls; reported per file: the weight bytes the model holds,
the process's RSS growth from loading and running, and seconds per step, with ratios against fp16
in the same run. On CPU the compute dtype is fp32, on CUDA fp16.

Prints one JSON object. Usage: ``python -m bench.quant [--steps N] [--size 32] [--device cpu|cuda]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.loading.architectures import UNET  # noqa: E402
from core.loading.loader import LoadOptions, load_diffusion_model  # noqa: E402
from core.models.unet import UNetConfig  # noqa: E402
from tests.fixtures.gguf_quant import write_comfy_gguf  # noqa: E402
from tests.fixtures.st_files import write_tensors  # noqa: E402

SD15 = UNetConfig.per_level(
    model_channels=320,
    channel_mult=(1, 2, 4, 4),
    num_res_blocks=2,
    level_depth=(1, 1, 1, 0),
    transformer_depth_middle=1,
    context_dim=768,
    num_heads=8,
    num_head_channels=None,
)


def _state() -> dict[str, torch.Tensor]:
    module = UNET.build(SD15, "meta", None)
    gen = torch.Generator().manual_seed(0)
    out = {}
    for key, meta in module.state_dict().items():
        shape = tuple(meta.shape)
        noise = torch.randn(shape, generator=gen)
        value = noise / math.sqrt(math.prod(shape[1:])) if len(shape) >= 2 else 0.1 * noise
        out[key] = value.to(torch.float16)
    return out


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def _measure(path: Path, device: str, steps: int, size: int) -> dict[str, float]:
    gc.collect()
    before = _rss()
    dtype = torch.float16 if device == "cuda" else torch.float32
    loaded = load_diffusion_model(path, LoadOptions(device=device))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, 4, size, size, generator=gen).to(device, dtype)
    ctx = torch.randn(1, 77, 768, generator=gen).to(device, dtype)
    t = torch.tensor([500.0], device=device)
    times = []
    with torch.no_grad():
        for _ in range(steps + 1):  # the first call warms up (page-in, allocator)
            t0 = time.perf_counter()
            loaded.module(x, t, ctx)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    held = loaded.nbytes
    rss = _rss() - before
    cuda_peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    del loaded
    gc.collect()
    return {
        "weight_bytes": held,
        "rss_growth_bytes": rss,
        "cuda_peak_bytes": cuda_peak,
        "s_per_step": min(times[1:]),
        "first_step_s": times[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--size", type=int, default=32, help="latent side (32 = a 256 px image)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        d = Path(tmp)
        state = _state()
        files = {"fp16": write_tensors(d / "sd15-fp16.safetensors", state)}
        for qtype in ("Q8_0", "Q4_K"):
            files[qtype] = write_comfy_gguf(d / f"sd15-{qtype}.gguf", "sd1", state, qtype)[0]
        sizes = {k: p.stat().st_size for k, p in files.items()}
        del state
        gc.collect()
        results = {k: _measure(p, args.device, args.steps, args.size) for k, p in files.items()}
    base = results["fp16"]
    for k, r in results.items():
        r["file_bytes"] = sizes[k]
        r["weight_bytes_vs_fp16"] = round(r["weight_bytes"] / base["weight_bytes"], 3)
        r["s_per_step_vs_fp16"] = round(r["s_per_step"] / base["s_per_step"], 3)
    print(
        json.dumps(
            {
                "bench": "quant",
                "network": "SD1.5 UNet (860 M weights)",
                "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(0),
                "threads": torch.get_num_threads(),
                "latent": [args.size, args.size],
                "steps": args.steps,
                "python": platform.python_version(),
                "torch": torch.__version__,
                "numpy": np.__version__,
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
