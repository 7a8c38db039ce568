"""Benchmark: a real-size Qwen-Image picture inside a RAM limit, and on simulated cards.

``loadout generate`` (a child process, ``bench.limited``: the kernel's ``RLIMIT_DATA`` caps its
private memory; ``/proc`` sampled for peak RSS, RssAnon, RssFile, VmData) on real-size random-weight
files in Comfy-Org's layouts (``bench.qwen_image_files``: the 20.4 B MMDiT plain fp8, Qwen2.5-VL-7B
fp8-scaled with its vision tower, the VAE; 30.07 GB). One row per ``--vram-limit`` (``none``: no
limit given, the manager's own view of the device); the rows' pictures are compared bit for bit.
``--comfy DIR``: ComfyUI (its source in DIR) runs the same picture in the same limit afterwards
(``bench.comfy_qwen``).

``python -m bench.qwen_image /tmp/h31q --size 256 --steps 1 --data-limit 6GiB --vram-limits 4GiB``
``python -m bench.qwen_image /tmp/h31q --size 64 --vram-limits 12GiB,8GiB``
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.limited import placement, run_limited  # noqa: E402

PROMPT = "a lighthouse on a cliff at dawn, film photograph"


def _digest(path: Path) -> str | None:
    if not path.exists():
        return None
    from PIL import Image

    return hashlib.sha256(Image.open(path).convert("RGB").tobytes()).hexdigest()[:16]


def loadout_row(files: tuple[Path, Path, Path], args: argparse.Namespace, limit: str, data: int) -> dict:
    dit, text, vae = files
    out = Path(args.folder) / f"loadout_{args.size}_{limit}.png"
    out.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "app.cli", "generate", "--diffusion-model", str(dit),
        "--text-encoder", str(text), "--vae", str(vae), "--prompt", PROMPT,
        "--size", f"{args.size}x{args.size}", "--steps", str(args.steps),
        "--cfg", "1", "--sampler", "euler", "--scheduler", "simple", "--seed", str(args.seed),
        "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    if limit != "none":
        cmd[-4:-4] = ["--vram-limit", limit]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    load = os.getloadavg()
    run = run_limited(cmd, data, cwd=ROOT, env=env)
    report = json.loads(run.stdout) if run.returncode == 0 else {}
    return {
        "tool": "loadout",
        "vram_limit": limit,
        "command": " ".join(cmd),
        "returncode": run.returncode,
        "wall_seconds": run.wall_seconds,
        "seconds_per_step": report.get("seconds_per_step"),
        "seconds": report.get("seconds"),
        "peak_bytes": report.get("peak_bytes"),
        **run.memory(),
        "picture_sha256": _digest(out),
        "events": placement(report),
        "notes": report.get("notes"),
        "error": None if run.returncode == 0 else run.stderr[-3000:],
        "load_average_at_start": load,
    }


def main(argv: list[str] | None = None) -> None:
    from app.commands.args import parse_bytes
    from bench.qwen_image_files import picture_files

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", help="where the real-size files are written (30 GB) and the pictures go")
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-limit", default="6GiB", help="RLIMIT_DATA of each generating process")
    p.add_argument(
        "--vram-limits", default="4GiB", help="comma-separated cards the manager sees; none: no limit"
    )
    p.add_argument("--comfy", metavar="DIR", help="also run ComfyUI (its source in DIR) on the same files")
    p.add_argument("--comfy-deps", metavar="DIR", help="packages ComfyUI needs that this environment lacks")
    p.add_argument(
        "--comfy-watchdog", action="store_true", help="ComfyUI killed past --data-limit of RssAnon"
    )
    p.add_argument("--only-comfy", action="store_true", help="no Loadout rows (--comfy alone)")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    t0 = time.perf_counter()
    files = picture_files(folder)
    written = time.perf_counter() - t0
    data = parse_bytes(args.data_limit)
    limits = [] if args.only_comfy else args.vram_limits.split(",")
    rows = [loadout_row(files, args, limit, data) for limit in limits]
    if args.comfy:
        from bench.comfy_qwen import comfy_row

        rows.append(comfy_row(files, args, data, Path(args.comfy)))
    digests = {r["picture_sha256"] for r in rows if r["tool"] == "loadout"}
    print(json.dumps({
        "bench": "qwen_image",
        "files_bytes": {f.name: f.stat().st_size for f in files},
        "files_total_bytes": sum(f.stat().st_size for f in files),
        "files_written_seconds": round(written, 1),
        "data_limit_bytes": data,
        "size": args.size,
        "steps": args.steps,
        "same_bits": len(digests) == 1 and None not in digests,
        "rows": rows,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
