"""Generation speed: seconds per step and seconds to the first picture, with the text-encode /
sample / decode split, on full-size SD1.5 and SDXL checkpoints (random fp16 weights: the work is
the same as a real model's; the pictures are noise).

    python -m bench.generate --models sd15 sdxl --size 512 --steps 3 [--device cuda] [--vram-limit 4GiB]

Prints one JSON object per model. Files are written once into ``.bench-cache/load/`` (shared with
``bench/load.py``). Each model runs in its own process, so peak RSS is the model's own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _file(name: str, cache: Path) -> Path:
    from bench.load import _layouts, ensure_file

    return ensure_file(cache / f"{name}_fp16_random.safetensors", _layouts()[name]())


def run_one(
    path: Path, size: int, steps: int, device: str, vram_limit: int | None, out: Path
) -> dict[str, Any]:
    import resource

    import torch

    from core.generate.headless import generate_files
    from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling

    torch.set_num_threads(max(1, torch.get_num_threads()))
    request = GenerateRequest(
        ModelFiles(checkpoint=path),
        ImageSettings(
            "a lighthouse on a cliff at dusk", "blurry", Sampling(seed=1, steps=steps, cfg=7.0), size, size
        ),
        output=out,
        device=device,
        vram_limit=vram_limit,
    )
    t0 = time.perf_counter()
    result = generate_files(request)
    total = time.perf_counter() - t0
    return {
        "seconds_to_first_image": round(total, 2),
        "seconds_per_step": round(result.seconds_per_step, 3),
        "seconds": {k: round(v, 2) for k, v in result.seconds.items()},
        "load_seconds": round(total - sum(result.seconds.values()), 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_bytes": result.peak_bytes,
        "events": len(result.events),
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", nargs="+", default=["sd15"], choices=["sd15", "sdxl"])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--vram-limit", default=None)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "load")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one model in this process
    args = ap.parse_args(argv)
    from app.commands.args import parse_bytes

    limit = parse_bytes(args.vram_limit) if args.vram_limit else None
    if args.one:
        out = ROOT / ".bench-cache" / "generate" / f"{Path(args.one).stem}.png"
        print(json.dumps(run_one(Path(args.one), args.size, args.steps, args.device, limit, out)))
        return
    for name in args.models:
        path = _file(name, args.cache)
        cmd = [sys.executable, "-m", "bench.generate", "--one", str(path), "--size", str(args.size),
               "--steps", str(args.steps), "--device", args.device]  # fmt: skip
        if args.vram_limit:
            cmd += ["--vram-limit", args.vram_limit]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(json.dumps({"model": name, "error": done.stderr.strip().splitlines()[-1:]}))
            continue
        report = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({"model": name, "size": args.size, "steps": args.steps, "device": args.device,
                          "vram_limit": args.vram_limit, **report}))  # fmt: skip


if __name__ == "__main__":
    main()
