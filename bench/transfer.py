"""Benchmark (GPU): host->device bandwidth for pageable and pinned copies, Loadout's loader path,
and a plain ``tensor.to("cuda")`` of the same bytes. Target (issue 5): the full-load path reaches
>= 85 % of the measured pinned bandwidth.

Loadout's path: a memory-mapped safetensors file (warm page cache) -> ``TorchMover.load`` of every
layer of a UNet built from it, with pinning on (the app's default: through two pinned load buffers,
``core.ops.bulk_copy``) and, as the baseline in the same run, off (one tensor at a time).
Prints one JSON object; without CUDA it says so and exits 0.
``python -m bench.transfer [--mib 1024]``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.loading.loader import load_diffusion_model  # noqa: E402
from core.memory.manager import MemoryManager  # noqa: E402
from core.memory.mover import TorchMover  # noqa: E402
from core.memory.planning import PlanSettings  # noqa: E402
from tests.fixtures import layouts_diffusion as ld  # noqa: E402
from tests.fixtures.st_files import write_sparse  # noqa: E402


def _gbps(nbytes: int, seconds: float) -> float:
    return round(nbytes / seconds / 1e9, 2)


def _timed(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "transfer", "skipped": "no CUDA device on this machine"}))
        return
    n = args.mib << 20
    pageable = torch.empty(n, dtype=torch.uint8)
    pinned = torch.empty(n, dtype=torch.uint8).pin_memory()
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    t_pageable = _timed(lambda: dst.copy_(pageable, non_blocking=True))
    t_pinned = _timed(lambda: dst.copy_(pinned, non_blocking=True))
    t_to = _timed(lambda: pageable.to("cuda"))

    with tempfile.TemporaryDirectory() as tmp:
        path = write_sparse(Path(tmp) / "sd15_unet.safetensors", ld.unet("sd1"))
        unet = load_diffusion_model(path)
        total = sum(t.numel() * t.element_size() for t in unet.module.state_dict().values())
        for t in unet.module.state_dict().values():  # warm the page cache
            t.sum()

        def loader(pin: bool) -> None:
            mover = TorchMover(pin=pin)
            manager = MemoryManager(lambda: 1 << 40, mover, settings=PlanSettings(vram_state="normal"))
            manager.load_models([unet.module]).raise_if_refused()
            manager.unload_all()

        t_plain = _timed(lambda: loader(False), 3)  # one tensor at a time from the file's pages
        t_loader = _timed(lambda: loader(True), 3)  # through the two pinned load buffers (the app's)
        profile = cProfile.Profile()  # where the loader's time goes
        profile.runcall(loader, True)
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
        hot = [line.strip() for line in text.getvalue().splitlines() if line.strip()][-16:]
    pinned_bw = n / t_pinned
    print(json.dumps({
        "bench": "transfer", "device": torch.cuda.get_device_name(), "bytes": n,
        "pageable_gb_s": _gbps(n, t_pageable), "pinned_gb_s": _gbps(n, t_pinned),
        "tensor_to_cuda_gb_s": _gbps(n, t_to),
        "loader_full_load_gb_s": _gbps(total, t_loader),
        "loader_unpinned_gb_s": _gbps(total, t_plain),
        "loader_vs_pinned": round((total / t_loader) / pinned_bw, 3),
        "target": "loader >= 0.85 x pinned", "tensors": len(unet.module.state_dict()),
        "loader_profile_by_own_time": hot,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
