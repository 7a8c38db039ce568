"""``scripts/gpu-check`` runs end to end without a GPU: each CUDA-only section is skipped and says
why, and the report is written (the GPU plan is rehearsed on any machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_plan_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--quick", "--out", str(out),
         "--only", "environment,suite,bench_transfer"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["environment"]["status"] == "passed" and report["environment"]["torch"] == torch.__version__
    if not torch.cuda.is_available():
        for name in ("suite", "bench_transfer"):
            assert report[name]["status"] == "skipped" and "no CUDA device" in report[name]["reason"]
