"""Benchmark: `load_checkpoint` time-to-ready and peak RSS vs ``safetensors.torch.load_file``.

Writes full-size fp16 checkpoints once into ``.bench-cache/load/`` (SD1.5 ~2.1 GB, SDXL ~6.9 GB):
the real key layout with true shapes, and a data area of real random, finite fp16 values (a
64 MiB block of ``torch.randn(...).half()`` written over and over: no sparse holes). Then, in the
same run and on the same file, measures four methods, each in a fresh subprocess so that its
peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``) is its own:

* ``baseline_load_file``: ``safetensors.torch.load_file(path)``; in safetensors 0.8 its default
  ``backend="mmap"`` is zero-copy too: tensors are views on a mapping, read when touched;
* ``baseline_load_file_touched``: the same, then every tensor summed;
* ``baseline_load_file_pread``: ``load_file(path, backend="pread")``, which copies the whole file
  into memory (what ``load_file`` did before it was zero-copy): for reference;
* ``loadout_ready``: ``core.loading.loader.load_checkpoint(path)``: networks built, weights assigned
  (memory-mapped, so pages are read only when touched);
* ``loadout_ready_touched``: the same, then every parameter, buffer and extra summed, so that
  every page of the file is really read: the fair comparison with the baseline, which copies
  the whole file into memory.

The page cache is warm: each round starts with one untimed read of the whole file. Times are the
load call (plus the touch) inside the subprocess, imports excluded (reported apart); the median of
``--repeat`` rounds, methods interleaved within a round. Each run uses one torch thread
(``--threads``): see ``run_method``.

The decoder-LLM text encoders (``--kinds qwen3-4b,gemma2-2b``: Comfy-Org's ``qwen_3_4b`` 8.0 GB
and ``gemma_2_2b`` 5.2 GB layouts at full size) go through ``load_text_encoder`` instead, in the
``--formats`` asked: ``fp16`` (as above), ``bf16`` (the released files' dtype) and ``fp8`` (the
``*_fp8_scaled`` layout: every linear matrix ``float8_e4m3fn`` with a float32 ``scale_weight``
beside it and a ``scaled_fp8`` marker, the embeddings and norms bf16), each dtype's bytes real
random values of that dtype. fp8 weights stay fp8 when loaded (``ScaledFp8Weight``); the touch
reads every stored byte (fp8 values as bytes) on both sides. ``--remove-files`` deletes each file
after it is measured (full-size files are large: measure a few at a time).

Prints one JSON object. Usage: ``python -m bench.load [--kinds sd15,sdxl] [--formats fp16]
[--repeat R] [--cache DIR] [--methods m1,m2] [--remove-files]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BLOCK_BYTES = 64 * 1024 * 1024
TIME_TARGET = 1.2  # loadout seconds / baseline seconds
RSS_TARGET = 1.15  # peak RSS / file size

#: method -> (implementation, touch every tensor after loading)
METHODS: dict[str, tuple[str, bool]] = {
    "baseline_load_file": ("baseline", False),
    "baseline_load_file_touched": ("baseline", True),
    "loadout_ready": ("loadout", False),
    "loadout_ready_touched": ("loadout", True),
    # last in a round: it frees gigabytes of private memory on exit
    "baseline_load_file_pread": ("pread", False),
}


#: text-encoder files (loaded with ``load_text_encoder``): the real Comfy-Org layout at full size
TEXT_ENCODERS = ("qwen3-4b", "gemma2-2b")


def _llm_layout(family: str) -> Mapping[str, Any]:
    from core.models.llm import LlmConfig, LlmTextModel

    model = LlmTextModel(LlmConfig.preset(family), device="meta")
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


#: linear matrices of an LLM (what the ``*_fp8_scaled`` files store in fp8): 2-D, not the embeddings
def _fp8_scaled(key: str, shape: tuple[int, ...]) -> bool:
    return key.endswith(".weight") and len(shape) == 2 and "embed" not in key


def formatted(layout: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """``layout`` (name -> shape) with each tensor's stored dtype for ``fmt``: fp16, bf16, or fp8
    (ComfyUI's ``scaled_fp8`` layout: marker, fp8 matrices each with a float32 ``scale_weight``)."""
    if fmt == "fp16":
        return {k: ("F16", tuple(v)) for k, v in layout.items()}
    if fmt == "bf16":
        return {k: ("BF16", tuple(v)) for k, v in layout.items()}
    if fmt != "fp8":
        raise SystemExit(f"unknown format {fmt!r}: fp16, bf16 or fp8")
    out: dict[str, Any] = {"scaled_fp8": ("F8_E4M3", (0,))}
    for k, v in layout.items():
        if _fp8_scaled(k, tuple(v)):
            out[k] = ("F8_E4M3", tuple(v))
            out[k[: -len(".weight")] + ".scale_weight"] = ("F32", ())
        else:
            out[k] = ("BF16", tuple(v))
    return out


def _layouts() -> dict[str, Callable[[], Mapping[str, Any]]]:
    from tests.fixtures import layouts_diffusion as ld

    llms = {f: (lambda f=f: _llm_layout(f)) for f in TEXT_ENCODERS}
    return {"sd15": ld.sd1_checkpoint, "sdxl": ld.sdxl_checkpoint, **llms}


# --- the files ------------------------------------------------------------------------------------


def random_block(nbytes: int = BLOCK_BYTES, seed: int = 0, dtype: str = "F16") -> bytes:
    """``nbytes`` of random, finite values of ``dtype``: standard normal (F16, BF16, F8_E4M3), or
    small positive numbers (F32: the fp8 files' scales)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    torch_dtype = {
        "F16": torch.half,
        "BF16": torch.bfloat16,
        "F8_E4M3": torch.float8_e4m3fn,
        "F32": torch.float,
    }
    size = torch.empty((), dtype=torch_dtype[dtype]).element_size()
    values = torch.randn(nbytes // size, generator=g)
    if dtype == "F32":
        values = values.abs() * 0.01 + 1e-3
    block = values.to(torch_dtype[dtype])
    assert bool(torch.isfinite(block.float()).all())
    return block.view(torch.uint8).numpy().tobytes()


def ensure_file(
    path: Path, layout: Mapping[str, Any], *, block_bytes: int = BLOCK_BYTES, seed: int = 0
) -> Path:
    """A real safetensors file for ``layout`` (name -> shape, F16, or -> (dtype, shape)) filled
    with random data of each tensor's dtype; kept when it exists with the same header and size
    (written to a temporary name first, so never half-written)."""
    from tests.fixtures.st_files import BITS, header_bytes

    head, data_size = header_bytes(layout, dtype="F16", metadata={"modelspec.title": path.stem})
    if path.exists() and path.stat().st_size == len(head) + data_size:
        with open(path, "rb") as fh:
            if fh.read(len(head)) == head:
                return path
    path.parent.mkdir(parents=True, exist_ok=True)
    blocks: dict[str, memoryview] = {}
    at: dict[str, int] = {}  # where each dtype's block is read next (it cycles)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "wb") as fh:
        fh.write(head)
        for spec in layout.values():
            dt, shape = spec if spec and isinstance(spec[0], str) else ("F16", spec)
            if dt not in blocks:
                blocks[dt], at[dt] = memoryview(random_block(block_bytes, seed, dt)), 0
            left = (math.prod(shape) * BITS[dt] + 7) // 8
            block = blocks[dt]
            while left:
                n = min(left, len(block) - at[dt])
                fh.write(block[at[dt] : at[dt] + n])
                at[dt] = (at[dt] + n) % len(block)
                left -= n
    os.replace(tmp, path)
    return path


def warm(path: Path) -> float:
    """Read the whole file once (untimed by callers) so that it sits in the page cache."""
    t0 = time.perf_counter()
    buf = bytearray(BLOCK_BYTES)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass
    return time.perf_counter() - t0


# --- one method, in this process (the worker) -----------------------------------------------------


def _proc_status() -> dict[str, int]:
    """Current VmRSS / RssAnon / RssFile in bytes (Linux; empty elsewhere)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def _peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def _usage() -> tuple[float, int, int]:
    """(CPU seconds, major faults, minor faults) of this process so far."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime, u.ru_majflt, u.ru_minflt


def _touch(tensors: Iterable[Any]) -> tuple[int, int]:
    """Sum every tensor (reads every byte); (tensor count, bytes read)."""
    import torch

    count = nbytes = 0
    for t in tensors:
        if t.is_meta:
            raise AssertionError("a tensor is still on the meta device after loading")
        plain = t.as_subclass(torch.Tensor)  # a ScaledFp8Weight's stored values, not its dequantized ones
        if plain.dtype.itemsize == 1 and plain.is_floating_point():
            if plain.numel():  # fp8: max over the bytes (a byte sum is 60x slower than a 16-bit sum)
                plain.view(torch.uint8).max()
        else:
            plain.sum()
        count += 1
        nbytes += t.numel() * t.element_size()
    return count, nbytes


def _loadout_tensors(bundle: Any) -> Iterable[Any]:
    for comp in bundle.components:
        yield from comp.module.state_dict().values()
    for get in bundle.extras.values():
        yield get()


def run_method(method: str, path: Path, threads: int = 1) -> dict[str, Any]:
    """Load ``path`` with ``method`` in this process and report times and memory.

    ``threads``: torch intra-op threads (the touch's sums). One by default: on a small shared
    machine, two OpenMP threads spin at every barrier while another process holds a core, and
    the same touch swung from 0.5 s to 8 s between runs."""
    impl, touched = METHODS[method]
    t0 = time.perf_counter()
    import torch

    if threads > 0:
        torch.set_num_threads(threads)

    if impl in ("baseline", "pread"):
        from safetensors.torch import load_file

        import_s = time.perf_counter() - t0
        rss_floor = _proc_status().get("VmRSS", 0)
        u0 = _usage()
        t1 = time.perf_counter()
        # the default "mmap" backend is zero-copy (safetensors 0.8); "pread" copies the file into memory
        loaded: Any = load_file(str(path)) if impl == "baseline" else load_file(str(path), backend="pread")
        ready_s = time.perf_counter() - t1
        tensors: Callable[[], Iterable[Any]] = loaded.values
        components = None
    else:
        from types import SimpleNamespace

        from core.loading.loader import LoadOptions, load_checkpoint, load_text_encoder

        import_s = time.perf_counter() - t0
        rss_floor = _proc_status().get("VmRSS", 0)
        u0 = _usage()
        t1 = time.perf_counter()
        options = LoadOptions(dtype=None, device="cpu", progress=None, check=None)
        if path.name.startswith(TEXT_ENCODERS):
            loaded = SimpleNamespace(components=[load_text_encoder(path, options)], extras={})
        else:
            loaded = load_checkpoint(path, options)
        ready_s = time.perf_counter() - t1

        def tensors() -> Iterable[Any]:
            return _loadout_tensors(loaded)

        components = [f"{c.role}:{c.family}" for c in loaded.components]
    count = nbytes = 0
    if touched:
        count, nbytes = _touch(tensors())
    total_s = time.perf_counter() - t1
    u1 = _usage()
    return {
        "method": method,
        "seconds": total_s,
        "seconds_with_import": total_s + import_s,
        "ready_seconds": ready_s,
        "touch_seconds": total_s - ready_s if touched else 0.0,
        "import_seconds": import_s,
        "cpu_seconds": u1[0] - u0[0],  # user + system, load (+ touch)
        "major_faults": u1[1] - u0[1],  # pages read from disk: 0 when the page cache is warm
        "minor_faults": u1[2] - u0[2],
        "peak_rss_bytes": _peak_rss(),
        "rss_after_import_bytes": rss_floor,
        "end_rss": _proc_status(),
        "tensors_touched": count,
        "bytes_touched": nbytes,
        "components": components,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


# --- the driver -----------------------------------------------------------------------------------


def measure(method: str, path: Path, threads: int = 1) -> dict[str, Any]:
    """``run_method`` in a fresh interpreter (peak RSS of that method alone)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.load", "--threads", str(threads), "--worker", method, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{method} on {path.name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def bench_file(
    path: Path, repeat: int, methods: Iterable[str] = METHODS, *, warm_cache: bool = True, threads: int = 1
) -> dict[str, Any]:
    """Every method ``repeat`` times (interleaved, warm cache), medians, ratios and targets."""
    methods = list(methods)
    size = path.stat().st_size
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    warm_s = []
    for _ in range(repeat):
        warm_s.append(warm(path) if warm_cache else 0.0)
        for m in methods:
            runs[m].append(measure(m, path, threads))
    out: dict[str, Any] = {
        "path": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
        "bytes": size,
        "gb": round(size / 1e9, 3),
        "warm_read_seconds": round(statistics.median(warm_s), 3),
        "methods": {},
    }
    med: dict[str, dict[str, float]] = {}
    for m, rs in runs.items():
        med[m] = {
            "seconds": statistics.median(r["seconds"] for r in rs),
            "seconds_with_import": statistics.median(r["seconds_with_import"] for r in rs),
            "peak_rss_bytes": statistics.median(r["peak_rss_bytes"] for r in rs),
        }
        last = rs[-1]
        out["methods"][m] = {
            "seconds": round(med[m]["seconds"], 3),
            "ready_seconds": round(statistics.median(r["ready_seconds"] for r in rs), 3),
            "touch_seconds": round(statistics.median(r["touch_seconds"] for r in rs), 3),
            "import_seconds": round(statistics.median(r["import_seconds"] for r in rs), 3),
            "seconds_with_import": round(med[m]["seconds_with_import"], 3),
            "min_seconds": round(min(r["seconds"] for r in rs), 3),
            "runs_seconds": [round(r["seconds"], 3) for r in rs],
            "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in rs), 3),
            "major_faults": [r["major_faults"] for r in rs],
            "minor_faults": int(statistics.median(r["minor_faults"] for r in rs)),
            "peak_rss_bytes": int(med[m]["peak_rss_bytes"]),
            "peak_rss_gb": round(med[m]["peak_rss_bytes"] / 1e9, 3),
            "peak_rss_over_file": _ratio(med[m]["peak_rss_bytes"], size),
            "rss_after_import_bytes": int(statistics.median(r["rss_after_import_bytes"] for r in rs)),
            "end_rss_anon_bytes": last["end_rss"].get("RssAnon"),
            "end_rss_file_bytes": last["end_rss"].get("RssFile"),
            "tensors_touched": last["tensors_touched"],
            "bytes_touched": last["bytes_touched"],
            **({"components": last["components"]} if last["components"] else {}),
        }
    pairs = {
        "ready_vs_load_file": ("loadout_ready", "baseline_load_file"),
        "ready_touched_vs_load_file_touched": ("loadout_ready_touched", "baseline_load_file_touched"),
        "ready_touched_vs_load_file_pread": ("loadout_ready_touched", "baseline_load_file_pread"),
    }
    ratios: dict[str, Any] = {}
    for name, (ours, base) in pairs.items():
        if ours in med and base in med:
            ratios[name] = {
                "time": _ratio(med[ours]["seconds"], med[base]["seconds"]),
                "time_with_import": _ratio(
                    med[ours]["seconds_with_import"], med[base]["seconds_with_import"]
                ),
                "peak_rss": _ratio(med[ours]["peak_rss_bytes"], med[base]["peak_rss_bytes"]),
            }
    out["ratios"] = ratios
    out["targets"] = {
        m: {
            "time_vs_baseline": ratios[p]["time"],
            "time_ok": ratios[p]["time"] <= TIME_TARGET,
            "peak_rss_over_file": _ratio(med[m]["peak_rss_bytes"], size),
            "rss_ok": med[m]["peak_rss_bytes"] / size <= RSS_TARGET,
        }
        for m, p in (
            ("loadout_ready", "ready_vs_load_file"),
            ("loadout_ready_touched", "ready_touched_vs_load_file_touched"),
        )
        if p in ratios
    }
    return out


def machine(torch_version: str | None = None) -> dict[str, Any]:
    ram = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    ram = int(line.split()[1]) * 1024
    except OSError:
        pass
    import safetensors

    return {
        "cpus": os.cpu_count(),
        "ram_bytes": ram,
        "ram_gib": round(ram / 2**30, 1) if ram else None,
        "gpu": "none used (device=cpu)",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch_version,
        "safetensors": safetensors.__version__,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="sd15,sdxl", help="comma-separated: sd15, sdxl, qwen3-4b, gemma2-2b")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench-cache" / "load")
    ap.add_argument(
        "--formats", default="fp16", help="comma-separated: fp16, bf16, fp8 (text encoders: all three)"
    )
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of: " + ", ".join(METHODS))
    ap.add_argument("--remove-files", action="store_true", help="delete each file after measuring it")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in each run (0: torch's default)")
    ap.add_argument("--worker", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(run_method(args.worker[0], Path(args.worker[1]), args.threads)))
        return
    layouts = _layouts()
    files: dict[str, Any] = {}
    torch_version = None
    methods = args.methods.split(",")
    for kind in args.kinds.split(","):
        for fmt in args.formats.split(","):
            if fmt != "fp16" and kind not in TEXT_ENCODERS:
                raise SystemExit(f"{kind} is written in fp16 only")
            name = f"{kind}_{'fp8_scaled' if fmt == 'fp8' else fmt}_random.safetensors"
            t0 = time.perf_counter()
            path = ensure_file(args.cache / name, formatted(layouts[kind](), fmt))
            write_s = time.perf_counter() - t0
            key = kind if fmt == "fp16" else f"{kind}/{fmt}"
            files[key] = {
                "write_seconds": round(write_s, 1),
                **bench_file(path, args.repeat, methods, threads=args.threads),
            }
            if args.remove_files:
                path.unlink()
            torch_version = torch_version or _torch_version()
    out = {
        "bench": "load",
        "command": " ".join(["python -m bench.load", *(argv if argv is not None else sys.argv[1:])]),
        "page_cache": "warm: one untimed full read of the file before each round",
        "statistic": f"median of {args.repeat} runs, each method in a fresh subprocess",
        "seconds": "load call (+ touch) inside the subprocess, imports excluded",
        "torch_threads": args.threads or "torch default",
        "targets": {"time_vs_baseline": f"<= {TIME_TARGET}", "peak_rss_over_file": f"<= {RSS_TARGET}"},
        "files": files,
        "machine": machine(torch_version),
    }
    print(json.dumps(out, indent=1))


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


if __name__ == "__main__":
    main()
