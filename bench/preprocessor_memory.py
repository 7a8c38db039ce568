"""Benchmark: predicted vs measured activation memory of one run of a preprocessor network.

For NormalBAE (``core/archs/normalbae``: EfficientNet-B5 and the NNET decoder at the released
widths), each picture size runs once, float32, under
:class:`core.memory.tracking.ActivationTracker` (peak bytes of live activation tensors, weights and
the input excluded) and is compared with the package's ``activation_bytes`` (what the memory
manager is asked to keep free when it places the network). Every weight is a stride-0 view of one
zero scalar: the real shapes and kernels at a few bytes of weights (shapes alone decide activation
memory). Usage::

    python -m bench.preprocessor_memory [--sizes 64x64,256x256,512x512,512x768]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.archs.normalbae import PREPROCESSOR, NormalBae, NormalBaeConfig
from core.memory.tracking import ActivationTracker
from core.models.state import set_tensor


def stride0(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` (built on meta) with every tensor a zero scalar expanded to its shape."""
    zero = torch.zeros(())
    for key, t in list(module.state_dict(keep_vars=True).items()):
        set_tensor(module, key, zero.expand(t.shape))
    return module


def measure(model: torch.nn.Module, rows: int, cols: int) -> dict[str, object]:
    x = torch.zeros(1, 3, rows, cols)
    t0 = time.perf_counter()
    with torch.inference_mode(), ActivationTracker([x]) as tracker:
        out = model(x)
        del out
    predicted = PREPROCESSOR.activation_bytes(model.config, rows, cols)  # type: ignore[arg-type]
    return {
        "net": "normalbae", "rows": rows, "cols": cols, "dtype": "fp32",
        "measured_bytes": tracker.peak_bytes, "predicted_bytes": predicted,
        "ratio": round(predicted / tracker.peak_bytes, 4), "seconds": round(time.perf_counter() - t0, 2),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64x64,256x256,512x512,512x768")
    args = p.parse_args(argv)
    model = stride0(NormalBae(NormalBaeConfig(), device="meta")).eval()
    rows_out = []
    for size in args.sizes.split(","):
        rows, cols = (int(v) for v in size.split("x"))
        row = measure(model, rows, cols)
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    worst = max(abs(float(r["ratio"]) - 1) for r in rows_out)  # type: ignore[arg-type]
    print(json.dumps({"summary": True, "machine": platform.machine(), "torch": torch.__version__,
                      "worst_relative_error": round(worst, 4)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
