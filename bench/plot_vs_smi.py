"""Benchmark: the memory plot's GPU numbers against ``nvidia-smi`` while a model loads.

The window's plot samples :class:`app.backend.monitor.MemoryMonitor` (Qt-free: NVML through
core's probes). This loads an SDXL-sized UNet (full size, fp16, random weights) through the real
manager on a background thread, streamed in partly and then fully, while the main thread reads the
monitor and ``nvidia-smi`` in turn about ten times a second. A pair counts when the monitor read
the same value before and after the ``nvidia-smi`` call (the load did not move between the two
reads); the target is every such pair within 2 % of ``nvidia-smi`` (issue 36).

    python -m bench.plot_vs_smi [--seconds-after 2]

Prints one JSON object; ``{"skipped": reason}`` without CUDA or ``nvidia-smi``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MIB = 1 << 20


def _smi_used(smi: str) -> int:
    line = subprocess.run(
        [smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True, check=True, timeout=10,
    ).stdout.strip()  # fmt: skip
    return int(line.splitlines()[0]) * MIB


def _load(done: threading.Event, log: list[str]) -> None:
    import torch

    from core.models.unet import UNetModel
    from core.models.unet_config import UNetConfig
    from core.patching.patcher import ModelPatcher
    from tests.gpu.helpers import place, random_weights, weight_bytes

    try:
        unet = UNetModel(UNetConfig.sdxl(), device="meta")
        random_weights(unet, torch.float16)
        patcher = ModelPatcher(unet.eval())
        size = weight_bytes(unet)
        log.append(f"weights {size / 2**30:.2f} GiB")
        for fraction in (0.3, 0.6, 4.0):  # partly, more, then all of it (each a load decision)
            manager, mover = place(patcher, int(size * fraction), pin=True)
            torch.cuda.synchronize()
            log.append(f"placed at {fraction}: {torch.cuda.memory_allocated() / 2**30:.2f} GiB allocated")
            time.sleep(0.5)
            manager.unload_all("next step")
            manager.forget(patcher)
            mover.drop_prefetched()
    except Exception as exc:  # a failed load is reported, never a hung sampler
        log.append(f"load failed: {type(exc).__name__}: {exc}")
    finally:
        done.set()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds-after", type=float, default=2.0)
    args = ap.parse_args(argv)
    import torch

    smi = shutil.which("nvidia-smi")
    if not torch.cuda.is_available() or smi is None:
        return {"skipped": "needs a CUDA device and nvidia-smi"}
    from app.backend.monitor import MemoryMonitor

    monitor = MemoryMonitor.discover()
    if monitor.gpu is None:
        return {"skipped": "the monitor found no accelerator"}
    done, log = threading.Event(), []
    loader = threading.Thread(target=_load, args=(done, log), daemon=True)
    pairs: list[dict[str, int]] = []
    moving = 0
    loader.start()
    end = None
    while end is None or time.monotonic() < end:
        if done.is_set() and end is None:
            end = time.monotonic() + args.seconds_after
        before = monitor.sample().gpu_used
        smi_used = _smi_used(smi)
        after = monitor.sample().gpu_used
        if before is None or after is None:
            return {"skipped": "the monitor reads no GPU memory (NVML and torch both failed)"}
        if abs(after - before) > MIB:
            moving += 1  # the load moved between the reads: no fair pair
        else:
            pairs.append({"plot": after, "nvidia_smi": smi_used})
        time.sleep(0.1)
    loader.join(timeout=60)
    worst = max((abs(p["plot"] - p["nvidia_smi"]) / max(p["nvidia_smi"], 1) for p in pairs), default=None)
    span = (min(p["nvidia_smi"] for p in pairs), max(p["nvidia_smi"] for p in pairs)) if pairs else (0, 0)
    return {
        "bench": "plot_vs_smi",
        "device": torch.cuda.get_device_name(0),
        "pairs": len(pairs),
        "pairs_skipped_while_moving": moving,
        "nvidia_smi_range_mib": [span[0] // MIB, span[1] // MIB],
        "worst_relative_difference": None if worst is None else round(worst, 5),
        "within_2_percent": worst is not None and worst <= 0.02,
        "samples_mib": [
            [p["plot"] // MIB, p["nvidia_smi"] // MIB] for p in pairs[:: max(1, len(pairs) // 40)]
        ],
        "load": log,
        "torch": torch.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
