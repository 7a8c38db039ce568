"""The hires fix and `loadout upscale` on full-size files (random weights: the work of real ones).

    python -m bench.hires --part hires   [--size 512 --scale 2 --steps 2 --hires-steps 2] [--vram-limit 4GiB]
    python -m bench.hires --part upscale [--picture 256]

``hires``: SD1.5 (the fp16 random checkpoint of ``bench/generate.py``) at SIZE², then its latent
scaled by SCALE (nearest-exact) and a second pass at denoise 0.5; seconds per step of each pass
(the first pass is the baseline: ``ratio`` is pass 2 over pass 1), the split and the peaks.
``upscale``: a RealESRGAN x4plus-size RRDBNet (64 features, 23 blocks, 16.7 M parameters, random
weights in the released layout) over a PICTURE² picture through ``loadout upscale``'s code.
One JSON object; each part runs in its own process so peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache"


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_hires(size: int, scale: float, steps: int, hires_steps: int, limit: int | None) -> dict[str, Any]:
    from bench.generate import _file
    from core.generate.command import generate_files
    from core.generate.events import GenerateProgress
    from core.generate.hires_settings import HiresFix
    from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling

    path = _file("sd15", CACHE / "load")
    passes: list[list[float]] = []
    last = [0.0]

    def progress(p: GenerateProgress) -> None:
        now = time.perf_counter()
        if p.phase == "sample" and p.step == 0:
            passes.append([])
        elif p.phase == "sample":
            passes[-1].append(now - last[0])
        last[0] = now

    settings = ImageSettings(
        "a lighthouse on a cliff at dusk", "blurry", Sampling(seed=1, steps=steps, cfg=7.0), size, size,
        hires=HiresFix(scale, 0.5, hires_steps, "nearest-exact"),
    )  # fmt: skip
    request = GenerateRequest(
        ModelFiles(checkpoint=path), settings, output=CACHE / "hires" / "hires.png", vram_limit=limit
    )
    t0 = time.perf_counter()
    result = generate_files(request, progress=progress)
    total = time.perf_counter() - t0
    per_pass = [statistics.median(p[1:] or p) for p in passes]
    return {
        "part": "hires", "model": "sd15", "size": size, "scale": scale, "final_size": settings.final_size,
        "steps": [steps, hires_steps], "vram_limit": limit,
        "seconds_per_step": [round(s, 3) for s in per_pass],
        "ratio_pass2_to_pass1": round(per_pass[1] / per_pass[0], 2) if len(per_pass) == 2 else None,
        "seconds": {k: round(v, 2) for k, v in result.seconds.items()},
        "seconds_total": round(total, 2), "peak_bytes": result.peak_bytes, "peak_rss_bytes": _rss(),
    }  # fmt: skip


def run_upscale(picture: int) -> dict[str, Any]:
    import numpy as np
    from PIL import Image

    from core.generate.upscale_file import UpscaleRequest, upscale_file
    from tests.fixtures.upscale_models import write_rrdb

    folder = CACHE / "upscale"
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "RealESRGAN_x4plus_random.safetensors"
    if not model.exists():
        write_rrdb(model, nf=64, gc=32, blocks=23, seed=0)
    image = folder / f"in-{picture}.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (picture, picture, 3), dtype=np.uint8)).save(image)
    rss_before = _rss()
    t0 = time.perf_counter()
    result = upscale_file(UpscaleRequest(model, image, folder / "out.png"))
    total = time.perf_counter() - t0
    return {
        "part": "upscale", "model": "RRDBNet 64f 23b (RealESRGAN x4plus size)", "picture": picture,
        "output": [result.width, result.height], "seconds_upscale": round(result.seconds, 2),
        "seconds_total": round(total, 2), "peak_rss_bytes": result.peak_bytes,
        "rss_before_bytes": rss_before, "model_bytes": model.stat().st_size,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["hires", "upscale"], required=True)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--hires-steps", type=int, default=2)
    ap.add_argument("--picture", type=int, default=256)
    ap.add_argument("--vram-limit", default=None)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # internal: in this process
    args = ap.parse_args(argv)
    if not args.one:
        cmd = [sys.executable, "-m", "bench.hires", "--one", *(argv if argv is not None else sys.argv[1:])]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        print(
            done.stdout.strip().splitlines()[-1]
            if done.returncode == 0
            else json.dumps({"error": done.stderr[-2000:]})
        )
        return
    from app.commands.args import parse_bytes

    limit = parse_bytes(args.vram_limit) if args.vram_limit else None
    if args.part == "hires":
        report = run_hires(args.size, args.scale, args.steps, args.hires_steps, limit)
    else:
        report = run_upscale(args.picture)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
