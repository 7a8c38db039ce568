"""Generation speed: seconds per step and seconds to the first picture, with the text-encode /
sample / decode split, on full-size SD1.5 and SDXL checkpoints (random fp16 weights: the work is
the same as a real model's; the pictures are noise).

    python -m bench.generate --models sd15 sdxl --size 512 --steps 3 [--device cuda] [--vram-limit 4GiB]
        [--dtype fp16|bf16]
    python -m bench.generate --models sd15 --controlnet   # plain, then with a full-size SD1.5 ControlNet

Prints one JSON object per model. Files are written once into ``.bench-cache/load/`` (shared with
``bench/load.py``). Each model runs in its own process, so peak RSS is the model's own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.generate.events import GenerateResult

ROOT = Path(__file__).resolve().parents[1]


def _file(name: str, cache: Path) -> Path:
    from bench.load import _layouts, ensure_file

    return ensure_file(cache / f"{name}_fp16_random.safetensors", _layouts()[name]())


def _controlnet(cache: Path) -> tuple[Path, Path]:
    """A full-size SD1.5 ControlNet (lllyasviel's original layout, random fp16) and a hint picture."""
    import numpy as np
    from PIL import Image

    from bench.load import ensure_file
    from tests.fixtures.diffusion_layouts_unet import SD1, controlnet_ldm

    path = ensure_file(cache / "control_sd15_fp16_random.safetensors", controlnet_ldm(SD1), seed=3)
    hint = cache / "hint_edges.png"
    if not hint.exists():
        img = np.zeros((512, 512, 3), np.uint8)
        img[::37, :] = 255
        img[:, ::53] = 255
        Image.fromarray(img).save(hint)
    return path, hint


def timed(make: Callable[[], GenerateResult]) -> dict[str, Any]:
    """Run ``make`` (one generation) and report its seconds, phases and peak memory (this process's)."""
    import resource

    import torch

    t0 = time.perf_counter()
    result = make()
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


def run_one(
    path: Path,
    size: int,
    steps: int,
    device: str,
    vram_limit: int | None,
    out: Path,
    controlnet: tuple[Path, Path] | None = None,
    dtype: str | None = None,
) -> dict[str, Any]:

    import torch

    from core.generate.command import generate_files
    from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
    from core.generate.workflow_request import ControlNetUse

    torch.set_num_threads(max(1, torch.get_num_threads()))
    request = GenerateRequest(
        ModelFiles(checkpoint=path),
        ImageSettings(
            "a lighthouse on a cliff at dusk",
            "blurry",
            Sampling(seed=1, steps=steps, cfg=7.0),
            size,
            size,
            controlnets=(ControlNetUse(*controlnet),) if controlnet else (),
        ),
        output=out,
        device=device,
        vram_limit=vram_limit,
        dtype={"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        if dtype
        else None,
    )
    return timed(lambda: generate_files(request))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", nargs="+", default=["sd15"], choices=["sd15", "sdxl"])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--vram-limit", default=None)
    ap.add_argument(
        "--dtype",
        choices=["fp16", "bf16", "fp32"],
        default=None,
        help="the diffusion model's compute dtype (default: the policy decides)",
    )
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "load")
    ap.add_argument("--controlnet", action="store_true", help="also run with a full-size SD1.5 ControlNet")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one model in this process
    ap.add_argument("--with-controlnet", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from app.commands.args import parse_bytes

    limit = parse_bytes(args.vram_limit) if args.vram_limit else None
    if args.one:
        out = ROOT / ".bench-cache" / "generate" / f"{Path(args.one).stem}.png"
        cn = (Path(args.with_controlnet[0]), Path(args.with_controlnet[1])) if args.with_controlnet else None
        print(
            json.dumps(
                run_one(Path(args.one), args.size, args.steps, args.device, limit, out, cn, args.dtype)
            )
        )
        return
    runs: list[tuple[str, list[str]]] = [(name, []) for name in args.models]
    if args.controlnet:
        cn_file, hint = _controlnet(args.cache)
        runs.append(("sd15+controlnet", ["--with-controlnet", str(cn_file), str(hint)]))
    for name, extra in runs:
        path = _file(name.split("+")[0], args.cache)
        cmd = [sys.executable, "-m", "bench.generate", "--one", str(path), "--size", str(args.size),
               "--steps", str(args.steps), "--device", args.device, *extra]  # fmt: skip
        if args.vram_limit:
            cmd += ["--vram-limit", args.vram_limit]
        if args.dtype:
            cmd += ["--dtype", args.dtype]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(json.dumps({"model": name, "error": done.stderr.strip().splitlines()[-1:]}))
            continue
        report = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps({"model": name, "size": args.size, "steps": args.steps, "device": args.device,
                          "vram_limit": args.vram_limit, "dtype": args.dtype, **report}))  # fmt: skip


if __name__ == "__main__":
    main()
