"""Seconds per step and peak memory of the workflows beside text-to-image that `bench/generate.py`
and `bench/hires.py` do not cover: inpainting (SD1.5, SetLatentNoiseMask on a regular checkpoint)
and the SDXL refiner hand-off (SDXL base + refiner, two KSamplerAdvanced), on full-size checkpoints
with random fp16 weights (the work is a real model's; the pictures are noise).

    python -m bench.workflows [--size 512] [--steps 4] [--only inpaint|refiner] [--vram-limit 4GiB]

Prints one JSON object per workflow, each run in its own process (peak RSS is its own). Files are
written once into ``.bench-cache/load/`` (shared with ``bench/load.py`` and ``bench/generate.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _pictures(cache: Path, size: int) -> tuple[Path, Path]:
    """A starting picture and a mask repainting its centre (white = repaint)."""
    import numpy as np
    from PIL import Image

    init, mask = cache / f"init_{size}.png", cache / f"mask_{size}.png"
    if not init.exists():
        rng = np.random.default_rng(0)
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(init)
    if not mask.exists():
        m = np.zeros((size, size, 3), np.uint8)
        m[size // 4 : 3 * size // 4, size // 4 : 3 * size // 4] = 255
        Image.fromarray(m).save(mask)
    return init, mask


def _files(workflow: str, cache: Path, size: int) -> dict[str, Path]:
    from bench.load import ensure_file
    from tests.fixtures import layouts_diffusion as ld

    if workflow == "inpaint":
        init, mask = _pictures(cache, size)
        ckpt = ensure_file(cache / "sd15_fp16_random.safetensors", ld.sd1_checkpoint())
        return {"checkpoint": ckpt, "init": init, "mask": mask}
    base = ensure_file(cache / "sdxl_fp16_random.safetensors", ld.sdxl_checkpoint())
    refiner = ensure_file(
        cache / "sdxl_refiner_fp16_random.safetensors", ld.sdxl_refiner_checkpoint(), seed=5
    )
    return {"checkpoint": base, "refiner": refiner}


def run_one(
    workflow: str, files: dict[str, Path], size: int, steps: int, limit: int | None
) -> dict[str, Any]:
    from bench.generate import timed
    from core.generate.command import generate_files
    from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
    from core.generate.workflow_request import RefinerUse

    extra: dict[str, Any] = {}
    denoise = 1.0
    if workflow == "inpaint":
        extra = {"init_image": files["init"], "mask_image": files["mask"]}
        denoise = 0.75
    else:
        extra = {"refiner": RefinerUse(files["refiner"], 0.5)}
    settings = ImageSettings(
        "a lighthouse on a cliff at dusk", "blurry", Sampling(seed=1, steps=steps, cfg=7.0, denoise=denoise),
        size, size, **extra,
    )  # fmt: skip
    out = ROOT / ".bench-cache" / "workflows" / f"{workflow}.png"
    request = GenerateRequest(
        ModelFiles(checkpoint=files["checkpoint"]), settings, output=out, vram_limit=limit
    )
    return timed(lambda: generate_files(request))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--only", choices=["inpaint", "refiner"])
    ap.add_argument("--vram-limit", default=None)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "load")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one workflow in this process
    args = ap.parse_args(argv)
    from app.commands.args import parse_bytes

    limit = parse_bytes(args.vram_limit) if args.vram_limit else None
    if args.one:
        files = _files(args.one, args.cache, args.size)
        print(json.dumps(run_one(args.one, files, args.size, args.steps, limit)))
        return
    for workflow in [args.only] if args.only else ["inpaint", "refiner"]:
        _files(workflow, args.cache, args.size)  # written here, outside the measured process
        cmd = [sys.executable, "-m", "bench.workflows", "--one", workflow, "--size", str(args.size),
               "--steps", str(args.steps), "--cache", str(args.cache)]  # fmt: skip
        if args.vram_limit:
            cmd += ["--vram-limit", args.vram_limit]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(json.dumps({"workflow": workflow, "error": done.stderr.strip().splitlines()[-3:]}))
            continue
        report = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({"workflow": workflow, "size": args.size, "steps": args.steps,
                          "vram_limit": args.vram_limit, **report}))  # fmt: skip


if __name__ == "__main__":
    main()
