"""Benchmark: `inspect` throughput on real-layout files vs a bare safetensors key listing.

Writes a library of sparse full-size real-layout files once (SDXL and SD1.5 checkpoints, Flux-dev
diffusion models, SDXL/SD1.5 kohya LoRAs, Flux LoRAs, VAEs, T5), then times, in the same run:

* baseline: ``safetensors.safe_open(path, "pt")`` and ``list(f.keys())`` per file;
* loadout: ``core.inspect.inspect_file(path)`` per file (validated header, detection, metadata,
  sidecars: everything the `inspect` JSON holds).

Prints one JSON object. Usage: ``python -m bench.inspect [--files N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from safetensors import safe_open

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.inspect import inspect_file  # noqa: E402
from tests.fixtures import layouts_diffusion as ld  # noqa: E402
from tests.fixtures.diffusion_layouts_components import kl_vae  # noqa: E402
from tests.fixtures.layouts_encoders import t5_xxl  # noqa: E402
from tests.fixtures.layouts_lora import (  # noqa: E402
    clip_layers,
    flux_layers,
    lora_layout,
    unet_attention_layers,
)
from tests.fixtures.st_files import write_sparse  # noqa: E402

KINDS: dict[str, Callable[[], dict]] = {
    "sdxl_checkpoint": ld.sdxl_checkpoint,
    "sd15_checkpoint": ld.sd1_checkpoint,
    "flux_dev_unet": lambda: ld.flux("dev"),
    "sdxl_kohya_lora": lambda: lora_layout(
        [*unet_attention_layers("sdxl", naming="original"), *clip_layers(768, 12, "te1")], "kohya", rank=32
    ),
    "sd15_kohya_lora": lambda: lora_layout(unet_attention_layers("sd1"), "kohya", rank=32),
    "flux_lora": lambda: lora_layout(flux_layers(), "kohya", rank=16),
    "vae": kl_vae,
    "t5xxl": t5_xxl,
}


def build_library(cache: Path, n: int) -> list[Path]:
    cache.mkdir(parents=True, exist_ok=True)
    names = list(KINDS)
    layouts: dict[str, dict] = {}
    paths = []
    for i in range(n):
        kind = names[i % len(names)]
        p = cache / f"{i:05d}_{kind}.safetensors"
        if not p.exists():
            if kind not in layouts:
                layouts[kind] = KINDS[kind]()
            write_sparse(p, layouts[kind], metadata={"modelspec.title": p.stem})
        paths.append(p)
    return paths


def baseline(paths: list[Path]) -> int:
    count = 0
    for p in paths:
        with safe_open(str(p), "pt") as f:
            count += len(list(f.keys()))
    return count


def loadout(paths: list[Path]) -> int:
    count = 0
    for p in paths:
        r = inspect_file(p)
        assert r.ok and r.detection is not None and r.detection.kind != "unknown", (p, r.error)
        count += 1
    return count


def timed(fn: Callable[[list[Path]], int], paths: list[Path], repeat: int) -> list[float]:
    fn(paths)  # warm the page cache and imports
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(paths)
        runs.append(time.perf_counter() - t0)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "inspect")
    args = ap.parse_args()
    paths = build_library(args.cache, args.files)
    logical = sum(p.stat().st_size for p in paths)
    base = statistics.median(timed(baseline, paths, args.repeat))
    ours = statistics.median(timed(loadout, paths, args.repeat))
    out = {
        "bench": "inspect",
        "files": len(paths),
        "mix": {k: sum(1 for p in paths if p.stem.endswith(k)) for k in KINDS},
        "logical_gb": round(logical / 1e9, 1),
        "baseline_safe_open_keys": {"seconds": round(base, 3), "files_per_s": round(len(paths) / base, 1)},
        "loadout_inspect": {
            "seconds": round(ours, 3),
            "files_per_s": round(len(paths) / ours, 1),
            "files_per_min": round(60 * len(paths) / ours),
        },
        "ratio_vs_baseline": round(ours / base, 2),
        "target": "ratio <= 2.0 and thousands of files per minute",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
