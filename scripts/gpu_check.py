"""The GPU plan in one command: runs each check, writes one JSON report (``scripts/gpu-check``).

Sections (``--only`` picks some; each is a JSON object with ``status`` passed / failed / skipped,
``reason``, ``seconds`` and what it measured):

* ``environment``  torch, CUDA, the card.
* ``suite``        the Qt-free suite (tests/core) under ``TORCH_CUDA_SANITIZER=1`` (CUDA only: the
                   sanitizer checks stream ordering of real kernels).
* ``gpu_tests``    tests/gpu (marked ``gpu``): the sync audit (``set_sync_debug_mode("error")``),
                   the race stress (SDXL-shaped UNet, 25/50 % resident, pinned on/off, a LoRA,
                   ``torch.cuda._sleep`` pre-hooks, 50 forwards bitwise, memory back to baseline),
                   an 8 GiB card simulated on the big one (Flux-shaped Q4_K and fp8 with a LoRA at
                   1024x1024 against the plan's peak), the SDXL VAE in bf16 and its tile fallback,
                   SDPA with the math kernel excluded, NVML against nvidia-smi.
* ``sync_audit``   the CPU stand-in of the audit (``tests/core/test_no_hidden_syncs.py``, on meta):
                   runs everywhere.
* ``fp8_matmul``   the real ``torch._scaled_mm`` path (``bench/fp8_matmul.py``) on a card with
                   fp8 matmul (NVIDIA CC >= 8.9): Flux-sized Fp8Linear layers against bf16 (error,
                   speedup) and a Flux-shaped model run with the fp8 override (``_scaled_mm`` calls
                   per step = its Linear layers, bf16 latent, the dtype reason); skipped with the
                   reason on any other card.
* ``generate``     full-size SD1.5 at 512 and SDXL at 1024 (random fp16 files) through ``loadout
                   generate``'s code: s/step, seconds to the picture, peak VRAM, in fp16 and bf16
                   fully resident and in fp16 on simulated 4 GiB / 2 GiB cards (``bench/generate.py``).
* ``plot_vs_smi``  the memory plot's GPU numbers against ``nvidia-smi`` during a load (2 %).
* ``zimage``       a real-size Z-Image Turbo step (6.15 B, random weights made on the card) at
                   1024x1024: s/step and the activation peak against its memory profile.
* ``bench_transfer``, ``bench_lowvram``, ``bench_inference_memory``  the benches (CUDA only), their
                   JSON kept in the report.

``--budget SECONDS`` bounds the whole run (a lent card is lent by the minute): sections run in the
order of ``SECTIONS`` (by value), each subprocess gets the time left, and a section that would
start with under 20 s left is skipped with that reason.

Without CUDA every CUDA-only part is ``skipped`` with the reason, so the plan can be rehearsed on
any machine (``--quick`` keeps that rehearsal short). Exit status: 1 when a section failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
Report = dict[str, Any]


def _cuda() -> tuple[bool, str]:
    import torch

    if not torch.cuda.is_available():
        return False, f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})"
    return True, torch.cuda.get_device_name(0)


def environment() -> Report:
    import torch

    cuda, what = _cuda()
    info: Report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    if cuda:
        p = torch.cuda.get_device_properties(0)
        info |= {"device": p.name, "capability": f"{p.major}.{p.minor}", "total_bytes": p.total_memory}
    return {"status": "passed", "reason": what, **info}


def _pythonpath() -> str:
    """The project first, then what PYTHONPATH already names (carried wheels on a machine
    without a package index are installed into a folder that PYTHONPATH names)."""
    return os.pathsep.join([str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])


#: when the whole check must be over (``--budget``): a lent GPU is lent by the minute, so each
#: section gets what is left and a section that would start too late is skipped with the reason
_DEADLINE = [float("inf")]


def _left() -> float:
    return _DEADLINE[0] - time.monotonic()


def _timeout() -> float:
    return max(1.0, min(3000.0, _left()))


def _pytest(args: list[str], env: dict[str, str] | None = None, timeout: float | None = None) -> Report:
    xml = ROOT / ".gpu-check" / f"junit-{abs(hash(tuple(args)))}.xml"
    xml.parent.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *args]
    run_env = {**os.environ, "PYTHONPATH": _pythonpath(), "QT_QPA_PLATFORM": "offscreen", **(env or {})}
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=timeout or _timeout()
        )
    except subprocess.TimeoutExpired as exc:
        return {
            "status": "failed",
            "reason": f"timed out after {exc.timeout:.0f} s",
            "command": " ".join(cmd),
        }
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures: list[str] = []
    messages: dict[str, str] = {}
    skips: dict[str, int] = {}
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            bad = case.find("failure") if case.find("failure") is not None else case.find("error")
            if bad is not None:
                counts["failed"] += 1
                failures.append(name)
                # the assertion and the last frames: a lent card's run must say why, not only what
                text = f"{bad.get('message') or ''}\n{bad.text or ''}"
                messages[name] = text[:800] + (" [...] " + text[-1500:] if len(text) > 2300 else text[800:])
            elif (skip := case.find("skipped")) is not None:
                counts["skipped"] += 1
                why = (skip.get("message") or "").split("\n")[0][:160]
                skips[why] = skips.get(why, 0) + 1
            else:
                counts["passed"] += 1
    ran = counts["passed"] + counts["failed"]
    status = "failed" if proc.returncode not in (0, 5) or counts["failed"] else "passed" if ran else "skipped"
    reason = "; ".join(f"{n} skipped: {w}" for w, n in skips.items()) if status == "skipped" else ""
    return {
        "status": status, "reason": reason, "counts": counts, "failures": failures[:50], "skips": skips,
        "failure_messages": dict(list(messages.items())[:20]),
        "output_tail": (proc.stdout + proc.stderr)[-3000:],
    }  # fmt: skip


def suite(quick: bool) -> Report:
    cuda, what = _cuda()
    if not cuda:
        return {"status": "skipped", "reason": f"the CUDA sanitizer needs a GPU: {what}"}
    args = ["tests/core", "-x"] + (["-m", "not slow"] if quick else [])
    return _pytest(args, {"TORCH_CUDA_SANITIZER": "1"})


#: ``--pytest-k``: run only the GPU tests this expression picks (a re-run of what failed)
_ONLY_TESTS = [""]


def gpu_tests(quick: bool) -> Report:
    return _pytest(["tests/gpu", "-m", "gpu", "-s", *(["-k", _ONLY_TESTS[0]] if _ONLY_TESTS[0] else [])])


def sync_audit(quick: bool) -> Report:
    return _pytest(
        ["tests/core/test_no_hidden_syncs.py"] + (["-k", "Q4_K or resident or tracer"] if quick else [])
    )


def _json_output(text: str) -> Any:
    """A bench's JSON: one object, or one object per line (a list); None when it printed none."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError:
        return None
    return lines or None


def _bench(module: str, args: list[str]) -> Report:
    cuda, what = _cuda()
    if not cuda:
        return {"status": "skipped", "reason": f"{module} measures a GPU: {what}"}
    cmd = [sys.executable, "-m", module, *args]
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=_timeout())
    except subprocess.TimeoutExpired as exc:
        return {"status": "failed", "reason": f"timed out after {exc.timeout:.0f} s (the --budget ran out)"}
    result = _json_output(proc.stdout)
    ok = proc.returncode == 0 and result is not None
    return {
        "status": "passed" if ok else "failed",
        "reason": "" if ok else proc.stderr[-2000:],
        "result": result,
    }


def fp8_matmul(quick: bool) -> Report:
    section = _bench("bench.fp8_matmul", ["--quick"] if quick else [])
    result = section.get("result")
    if isinstance(result, dict) and "skipped" in result:
        return {"status": "skipped", "reason": f"fp8 matmul: {result['skipped']}"}
    if isinstance(result, dict) and result.get("failures"):
        section["reason"] = "; ".join(result["failures"])[:2000]
    return section


#: (model, side) x (dtype, VRAM limit): SD1.5 at 512 and SDXL at 1024, fully resident in fp16 and
#: bf16, and in fp16 on simulated 4 GiB and 2 GiB cards (the same bits, streamed)
GENERATE_RUNS = [
    (model, side, dtype, limit)
    for model, side in (("sd15", 512), ("sdxl", 1024))
    for dtype, limit in (("fp16", None), ("bf16", None), ("fp16", "4GiB"), ("fp16", "2GiB"))
]


#: ``--generate``: the runs of :data:`GENERATE_RUNS` to make, as ``model:dtype:limit`` (empty: all)
_ONLY_RUNS: list[str] = []


def generate(quick: bool) -> Report:
    """Seconds per step, seconds to the first picture and peak VRAM of full-size SD1.5 / SDXL
    (random fp16 files) through ``loadout generate``'s code (``bench/generate.py``)."""
    cuda, what = _cuda()
    if not cuda:
        return {"status": "skipped", "reason": f"bench.generate measures a GPU here: {what}"}
    runs, failures = [], []
    chosen = [r for r in GENERATE_RUNS if not _ONLY_RUNS or f"{r[0]}:{r[2]}:{r[3]}" in _ONLY_RUNS]
    for model, side, dtype, limit in chosen[:2] if quick else chosen:
        if _left() < 30:
            failures.append(f"{model} {dtype} {limit}: not run, the --budget ran out")
            continue
        args = ["--models", model, "--size", str(side), "--steps", "8", "--device", "cuda", "--dtype", dtype]
        section = _bench("bench.generate", args + (["--vram-limit", limit] if limit else []))
        result = section.get("result")
        rows = result if isinstance(result, list) else [result] if result else []
        for row in rows:
            runs.append(row)
            if not isinstance(row, dict) or "error" in row:
                failures.append(f"{model} {dtype} {limit}: {row}")
        if section["status"] != "passed":
            failures.append(f"{model} {dtype} {limit}: {section['reason'][-300:]}")
    return {
        "status": "failed" if failures else "passed",
        "reason": "; ".join(failures)[:2000],
        "result": runs,
    }


SECTIONS = {  # in order of value: with a --budget the later ones are the ones left out
    "environment": lambda quick: environment(),
    "gpu_tests": gpu_tests,
    "fp8_matmul": fp8_matmul,
    "generate": generate,
    "bench_transfer": lambda quick: _bench("bench.transfer", ["--mib", "256" if quick else "1024"]),
    "plot_vs_smi": lambda quick: _plot_vs_smi(),
    "bench_lowvram": lambda quick: _bench("bench.lowvram", ["--repeat", "2" if quick else "5"]),
    "bench_inference_memory": lambda quick: _bench(
        "bench.inference_memory",
        ["--device", "cuda", "--dtypes", "fp16,bf16", "--sizes", "512,768,1024", "--fit"],
    ),
    "zimage": lambda quick: _bench(
        "bench.zimage", ["--device", "cuda", "--random", "--size", "1024", "--steps", "2" if quick else "4"]
    ),
    "suite": suite,
    "sync_audit": sync_audit,
}


def _plot_vs_smi() -> Report:
    section = _bench("bench.plot_vs_smi", [])
    result = section.get("result")
    if isinstance(result, dict) and "skipped" in result:
        return {"status": "skipped", "reason": result["skipped"]}
    if isinstance(result, dict) and not result.get("within_2_percent"):
        section["status"] = "failed"
        section["reason"] = (
            f"the plot is {result.get('worst_relative_difference')} off nvidia-smi (target 2 %)"
        )
    return section


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "gpu-check.json")
    ap.add_argument("--only", default="", help=f"comma-separated sections of: {', '.join(SECTIONS)}")
    ap.add_argument("--quick", action="store_true", help="short versions (a CPU rehearsal)")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds the whole check may take: each section gets what is left, and one "
        "that would start with under 20 s left is skipped with that reason",
    )
    ap.add_argument("--pytest-k", default="", help="gpu_tests: only the tests this -k expression picks")
    ap.add_argument(
        "--generate", default="", help="generate: only these runs, e.g. sdxl:fp16:2GiB,sd15:bf16:None"
    )
    ns = ap.parse_args(argv)
    _ONLY_TESTS[0] = ns.pytest_k
    _ONLY_RUNS[:] = [r for r in ns.generate.split(",") if r]
    unknown_runs = set(_ONLY_RUNS) - {f"{m}:{d}:{lim}" for m, _, d, lim in GENERATE_RUNS}
    if unknown_runs:
        ap.error(f"unknown --generate runs {sorted(unknown_runs)}")
    if ns.budget is not None:
        _DEADLINE[0] = time.monotonic() + ns.budget
    chosen = [s for s in ns.only.split(",") if s] or list(SECTIONS)
    unknown = sorted(set(chosen) - SECTIONS.keys())
    if unknown:
        ap.error(f"unknown sections {unknown}; known: {', '.join(SECTIONS)}")
    report: Report = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": ns.quick}
    for name in chosen:
        t0 = time.perf_counter()
        if _left() < 20:
            section = {
                "status": "skipped",
                "reason": f"not started: {max(0, _left()):.0f} s of the --budget left",
            }
        else:
            try:
                section = SECTIONS[name](ns.quick)
            except Exception as exc:  # a broken check is a failed section, never a lost report
                section = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
        section["seconds"] = round(time.perf_counter() - t0, 1)
        report[name] = section
        why = str(section.get("reason", ""))[:100]
        print(f"{name:24s} {section['status']:8s} {section['seconds']:7.1f} s  {why}")
        ns.out.write_text(json.dumps(report, indent=2))  # after each section: a killed run keeps its parts
    failed = [n for n in chosen if report[n]["status"] == "failed"]
    print(f"report: {ns.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
