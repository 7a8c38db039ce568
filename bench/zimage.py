"""Benchmark: a Z-Image Turbo (or Lumina 2) real-size Next-DiT step, seconds per step and memory.

Two sources of weights:

- ``--random``: the released shapes (Z-Image: 6.15 B parameters, 3840 wide, 30 layers) built on
  the meta device and filled with random numbers directly on ``--device`` (no file, no host copy):
  what a lent GPU runs without downloading 12 GB.
- ``FILE``: a real (or random-weight) diffusion-model file loaded the way Loadout loads it
  (memory-mapped, kept in its stored dtype, fp8-scaled and GGUF weights quantized) and moved to the
  device.

Each step is one forward at ``--size`` with 256 stand-in caption tokens (the test run's), timed
after a warm-up with the device synchronised. Reports the activation peak measured on CUDA
(``max_memory_allocated`` minus what was allocated before the step) against the family's memory
profile (``core.archs.nextdit``). On this project's 2-core CPU machine a 6 B forward at 1024 px
takes minutes: run it on a GPU (``--device cuda``), or ``--layers 2`` for a CPU rehearsal of the
code path (figures then say nothing about the real model).

``--picture DIR`` makes a whole picture instead, the way an artist does (``loadout generate
--diffusion-model ... --text-encoder ... --vae ...`` in a child process): real-size random-weight
files written into DIR once (``bench.zimage_files``: Z-Image Turbo 6.15 B and Qwen3-4B fp8-scaled,
the Flux VAE), run inside a RAM limit: the kernel's ``RLIMIT_DATA`` (``--data-limit``: every
private writable mapping, heap and anonymous memory counted by size, so the process cannot hold
more private memory than that, whatever it touches) and ``--vram-limit`` (the card the manager
sees; on the CPU, RAM is the device: what does not fit is streamed from the memory-mapped files).
The file-backed pages it maps are the page cache's, shared and reclaimable: counted in RSS,
reported apart (``/proc/PID/status`` sampled every 50 ms: peak VmRSS, RssAnon, RssFile).

``python -m bench.zimage --device cuda --random [--size 1024] [--steps 4] [--dtype bf16]``
``python -m bench.zimage z_image_turbo_bf16.safetensors --device cuda``
``python -m bench.zimage --picture /tmp/h29 --size 256 --steps 2 --data-limit 3GiB --vram-limit 2GiB``
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.archs.nextdit.net import MEMORY  # noqa: E402
from core.memory.inference import Workload, predict  # noqa: E402
from core.models.nextdit import NextDiT, NextDiTConfig  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_model(config: NextDiTConfig, device: torch.device, dtype: torch.dtype, seed: int) -> NextDiT:
    """The network with random weights made on ``device`` (matrices ~ 1/sqrt(fan-in), norms ~ 1)."""
    model = NextDiT(config, device="meta", dtype=dtype)
    model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 and "pad_token" not in name:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]), generator=gen)
            elif "norm" in name:
                p.normal_(1.0, 0.1, generator=gen)
            else:
                p.normal_(0.0, 0.1, generator=gen)
    return model.eval()


def file_model(path: str, device: torch.device, dtype: torch.dtype) -> tuple[NextDiT, str]:
    from core.loading.loader import load_diffusion_model

    loaded = load_diffusion_model(path)
    if not isinstance(loaded.module, NextDiT):
        raise SystemExit(f"{path} is a {loaded.family} model, not Lumina 2 / Z-Image")
    return loaded.module.to(device).eval(), loaded.family


def run(
    model: NextDiT, family: str, args: argparse.Namespace, device: torch.device, dtype: torch.dtype
) -> dict:
    cfg = model.config
    gen = torch.Generator().manual_seed(args.seed)
    side = args.size // 8
    x = torch.randn(1, cfg.in_channels, side, side, generator=gen).to(device, dtype)
    ctx = torch.randn(1, 256, cfg.cap_feat_dim, generator=gen).to(device, dtype)
    sigmas = torch.linspace(1.0, 0.2, args.steps + 1)
    steps = []
    with torch.inference_mode():
        model(x, sigmas[:1].to(device), ctx)  # warm-up (kernels, allocator)
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        for i in range(args.steps):
            t0 = time.perf_counter()
            v = model(x, sigmas[i : i + 1].to(device), ctx)
            _sync(device)
            steps.append(time.perf_counter() - t0)
            x = x + (sigmas[i + 1] - sigmas[i]).item() * v  # an Euler step, so each input differs
    peak = torch.cuda.max_memory_allocated(device) - before if device.type == "cuda" else None
    profile = "z-image" if cfg.z_image else "lumina2"
    attention = "cuda_flash" if device.type == "cuda" else "cpu_flash"
    size = torch.empty((), dtype=dtype).element_size()
    predicted = predict(profile, Workload(args.size, args.size, 1, size, attention), cfg.dim)
    params = sum(p.numel() for p in model.parameters())
    return {
        "bench": "zimage",
        "family": family,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": args.dtype,
        "size": args.size,
        "layers": cfg.n_layers,
        "params": params,
        "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "steps": args.steps,
        "seconds_per_step": statistics.median(steps),
        "step_seconds": steps,
        "activation_peak_bytes": peak,
        "predicted_activation_bytes": predicted,
        "profile": MEMORY[profile].profile.name,
        "finite": bool(torch.isfinite(x).all()),
    }


def picture(args: argparse.Namespace) -> dict:
    """A whole Z-Image picture through the command line, inside the RAM limit (see the notes)."""
    from app.commands.args import parse_bytes
    from bench.limited import placement, run_limited
    from bench.zimage_files import picture_files

    folder = Path(args.picture)
    t0 = time.perf_counter()
    dit, text, vae = picture_files(folder)
    written = time.perf_counter() - t0
    limit = parse_bytes(args.data_limit)
    out_png = folder / "zimage_picture.png"
    cmd = [
        sys.executable, "-m", "app.cli", "generate", "--diffusion-model", str(dit),
        "--text-encoder", str(text), "--vae", str(vae),
        "--prompt", "a lighthouse on a cliff at dawn, film photograph",
        "--size", f"{args.size}x{args.size}", "--steps", str(args.steps), "--seed", str(args.seed),
        "--vram-limit", args.vram_limit, "-o", str(out_png), "--json", "--quiet",
    ]  # fmt: skip

    run = run_limited(cmd, limit, cwd=ROOT)
    report = json.loads(run.stdout) if run.returncode == 0 else {"error": run.stderr[-3000:]}
    files = {p.name: p.stat().st_size for p in (dit, text, vae)}
    return {
        "bench": "zimage_picture",
        "command": " ".join(cmd),
        "returncode": run.returncode,
        "files_bytes": files,
        "files_total_bytes": sum(files.values()),
        "files_written_seconds": round(written, 1),
        "data_limit_bytes": limit,
        "vram_limit": args.vram_limit,
        "size": args.size,
        "steps": args.steps,
        "wall_seconds": run.wall_seconds,
        "seconds_per_step": report.get("seconds_per_step"),
        "seconds": report.get("seconds"),
        **run.memory(),
        "placement": placement(report),
        "notes": report.get("notes"),
        "error": report.get("error"),
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", nargs="?", help="a Z-Image / Lumina 2 diffusion-model file (or use --random)")
    p.add_argument("--random", action="store_true", help="random real-size weights made on the device")
    p.add_argument("--form", choices=["z-image", "lumina2"], default="z-image", help="with --random")
    p.add_argument("--layers", type=int, default=None, help="with --random: fewer joint layers (rehearsal)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--picture", metavar="DIR", help="a whole picture from real-size files written into DIR")
    p.add_argument(
        "--data-limit", default="3GiB", help="with --picture: RLIMIT_DATA of the generating process"
    )
    p.add_argument("--vram-limit", default="2GiB", help="with --picture: the card the manager sees")
    args = p.parse_args(argv)
    if args.picture:
        print(json.dumps(picture(args)))
        return
    if bool(args.file) == bool(args.random):
        p.error("give a FILE or --random")
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    if args.random:
        config = NextDiTConfig() if args.form == "z-image" else NextDiTConfig.lumina2()
        if args.layers is not None:
            config = replace(config, n_layers=args.layers)
        model, family = random_model(config, device, dtype, args.seed), args.form
    else:
        model, family = file_model(args.file, device, dtype)
    print(json.dumps(run(model, family, args, device, dtype)))


if __name__ == "__main__":
    main()
