"""Benchmark: peak RSS of ``loadout merge A B [C]`` against the size of the models it reads.

Writes full-size fp16 SD1.5 checkpoints (the real key layout and shapes, 2.1 GB each, filled with
random finite fp16 values: ``bench.load.ensure_file``; A, B and C from different seeds) once into
``.bench-cache/merge/``, then runs, each in a fresh subprocess so that its peak RSS
(``getrusage(RUSAGE_SELF).ru_maxrss``) is its own:

* ``imports``: the merge's imports alone (Python, torch, the engine): the floor every run pays;
* ``weighted``: ``merge_models([A, B], weighted 0.3 with per-block ratios)``;
* ``add_difference``: ``merge_models([A, B, C], add-difference 0.7)``, text encoders merged too;
* ``weighted_card``: the weighted merge through a 512 MiB card simulated on the CPU (the manager's
  placement; tensors split to fit).

Each merge streams every tensor from memory-mapped inputs, gives their pages back once written and
writes the output through the atomic writer, so its peak RSS stays near the imports' floor plus a
few tensors, whatever the models' size. Reported: seconds, peak RSS, and peak RSS over the sum of
the input files' sizes (the target: well under 1; a merge that loads its models would be above 1).

Prints one JSON object. Usage: ``python -m bench.merge_memory [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CACHE = ROOT / ".bench-cache" / "merge"
METHODS = ("imports", "weighted", "add_difference", "weighted_card")


def _peak() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def worker(method: str, out: Path) -> dict[str, Any]:
    """One method in this process: its seconds and peak RSS."""
    import torch

    from core.merging.merge import merge_models
    from core.merging.recipe import MergeMethod, MergeRecipe
    from core.session.placement import Placement, PlacementConfig

    torch.set_num_threads(1)
    a, b, c = (CACHE / f"sd15-{n}.safetensors" for n in "abc")
    if method == "imports":
        return {"seconds": 0.0, "peak_rss": _peak(), "inputs": []}
    blocks = (("input_blocks.", 0.2), ("middle_block.", 0.5), ("out", 0.8))
    manager = None
    if method == "add_difference":
        paths, recipe = [a, b, c], MergeRecipe(MergeMethod.ADD_DIFFERENCE, 0.7, text_encoders=0.7)
    else:
        paths, recipe = [a, b], MergeRecipe(MergeMethod.WEIGHTED, 0.3, blocks)
        if method == "weighted_card":
            manager = Placement(None, PlacementConfig(simulate_bytes=512 << 20)).manager
    t0 = time.perf_counter()
    result = merge_models(paths, recipe, out, manager=manager)
    seconds = time.perf_counter() - t0
    return {
        "seconds": round(seconds, 2),
        "peak_rss": _peak(),
        "inputs": [str(p) for p in paths],
        "chunk_bytes": result.chunk_bytes,
        "slices": result.slices,
        "merged": result.merged,
    }


def _run(method: str) -> dict[str, Any]:
    out = CACHE / f"out-{method}.safetensors"
    code = f"import json, sys; from bench.merge_memory import worker; from pathlib import Path; " \
           f"print(json.dumps(worker({method!r}, Path({str(out)!r}))))"  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    found: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    if out.exists():
        out.unlink()
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the model files for the next run")
    args = parser.parse_args(argv)
    from bench.load import _layouts, ensure_file

    layout = _layouts()["sd15"]()
    files = [ensure_file(CACHE / f"sd15-{n}.safetensors", layout, seed=i) for i, n in enumerate("abc")]
    sizes = {p.name: p.stat().st_size for p in files}
    results: dict[str, Any] = {}
    for method in METHODS:
        r = _run(method)
        total = sum(sizes[Path(p).name] for p in r.pop("inputs"))
        if total:
            r["peak_over_inputs"] = round(r["peak_rss"] / total, 3)
            r["peak_over_imports"] = round(r["peak_rss"] / results["imports"]["peak_rss"], 2)
            r["input_bytes"] = total
        results[method] = r
    report = {"machine": platform.machine(), "cpus": os.cpu_count(), "files": sizes, "results": results}
    print(json.dumps(report, indent=1))
    if not args.keep:
        for p in files:
            p.unlink()


if __name__ == "__main__":
    main()
