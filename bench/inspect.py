"""Benchmark: `inspect` throughput on real-layout files vs a bare safetensors key listing.

Writes a library of sparse full-size real-layout files once (SDXL and SD1.5 checkpoints, Flux-dev
diffusion models, SDXL/SD1.5 kohya LoRAs, Flux LoRAs, VAEs, T5), then times, in the same run:

* baseline: ``safetensors.safe_open(path, "pt")`` and ``list(f.keys())`` per file;
* loadout: ``core.inspect.inspect_file(path)`` per file (validated header, detection, metadata,
  sidecars: everything the `inspect` JSON holds). Files of one structure (same tensor entries,
  other metadata) share their validated entries and shape-only detection (``core.files.header_cache``
  and the detection memo), as in a real library of fine-tunes and LoRAs of one trainer; the
  library here is 8 structures x 50 files, and the caches persist for the process, so three rows:
* ``loadout_inspect``: caches warm (a rescan, or a library whose structures were seen before);
* ``loadout_inspect_cold``: caches cleared before each pass (the first file of each structure
  pays the full read and detection, the 49 others hit);
* ``loadout_inspect_uncached``: caches cleared before every file: what a file of a new structure
  costs (the figure before the caches).

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

from core.inspect import clear_caches, inspect_file  # noqa: E402
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


def loadout_cold(paths: list[Path]) -> int:
    clear_caches()
    return loadout(paths)


def loadout_uncached(paths: list[Path]) -> int:
    count = 0
    for p in paths:
        clear_caches()
        r = inspect_file(p)
        assert r.ok and r.detection is not None and r.detection.kind != "unknown", (p, r.error)
        count += 1
    return count


def timed(methods: dict[str, Callable[[list[Path]], int]], paths: list[Path], repeat: int) -> dict[str, dict]:
    """Median wall and CPU seconds of each method; rounds interleave the methods, so drift from
    other jobs on a shared machine hits all of them (CPU time is the steadier of the two there)."""
    for fn in methods.values():
        fn(paths)  # warm the page cache and imports
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in methods}
    for _ in range(repeat):
        for name, fn in methods.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn(paths)
            runs[name].append((time.perf_counter() - t0, time.process_time() - c0))
    return {
        name: {
            "seconds": statistics.median(w for w, _ in r),
            "cpu_seconds": statistics.median(c for _, c in r),
        }
        for name, r in runs.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "inspect")
    args = ap.parse_args()
    paths = build_library(args.cache, args.files)
    logical = sum(p.stat().st_size for p in paths)
    # In each round: cold clears the caches and fills them, so the warm pass after it is warm.
    methods = {
        "baseline_safe_open_keys": baseline,
        "loadout_inspect_cold": loadout_cold,
        "loadout_inspect": loadout,
        "loadout_inspect_uncached": loadout_uncached,
    }
    t = timed(methods, paths, args.repeat)
    base = t["baseline_safe_open_keys"]
    out: dict[str, object] = {
        "bench": "inspect",
        "files": len(paths),
        "mix": {k: sum(1 for p in paths if p.stem.endswith(k)) for k in KINDS},
        "logical_gb": round(logical / 1e9, 1),
    }
    for name, v in t.items():
        out[name] = {
            "seconds": round(v["seconds"], 3),
            "cpu_seconds": round(v["cpu_seconds"], 3),
            "files_per_min": round(60 * len(paths) / v["seconds"]),
        }
    for name, short in (("loadout_inspect", ""), ("loadout_inspect_cold", "cold_"),
                        ("loadout_inspect_uncached", "uncached_")):  # fmt: skip
        out[f"ratio_{short}vs_baseline"] = round(t[name]["seconds"] / base["seconds"], 2)
        out[f"ratio_{short}cpu_vs_baseline"] = round(t[name]["cpu_seconds"] / base["cpu_seconds"], 2)
    out["target"] = "ratio <= 2.0 and thousands of files per minute"
    out["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
