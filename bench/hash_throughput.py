"""Benchmark: full-file hashing for the library (SHA-256 / AutoV2, and A1111's LoRA hash).

One file of ``--mib`` MiB (2 GiB by default; a safetensors-shaped header, then data) is hashed in
the same run by:

1. ``read``: a plain read loop into one reused buffer (the disk/page-cache baseline: no hashing);
2. ``hashlib``: ``hashlib.sha256`` over the same loop (what any hasher pays);
3. ``store``: :meth:`HashStore.digest`, the library's path (chunks of ``CHUNK``, page-cache drop
   advice, stop check between chunks);
4. ``store_addnet``: the same with the LoRA hash too (two SHA-256 in one read).

Each is reported in MB/s (10^6 bytes per second) with its ratio to ``read`` and ``hashlib``, for a
warm file (in the page cache: the CPU's hashing speed) and, where the kernel lets this user drop a
file's cached pages (``posix_fadvise``), a cold one. Memory: peak RSS growth over the run's start,
which must stay near ``CHUNK`` whatever the file's size. Wall-clock MB/s on a shared machine
depend on its load (reported); ``mb_per_cpu_s`` (bytes per CPU second of this process) does not.
Prints one JSON object.

``python -m bench.hash_throughput [--mib 2048] [--repeat 2]`` (run under the heavy lock: it reads
the file ``4 x repeat`` times and writes it once).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from core.library.cache import InspectCache
from core.library.hashes import CHUNK, HashStore


def _rss_peak_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def _write(path: Path, mib: int) -> None:
    header = b'{"__metadata__":{"bench":"hash"}}'
    block = os.urandom(8 << 20)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        for _ in range(max(1, mib // 8)):
            f.write(block)


def _drop(path: Path) -> bool:
    """Ask the kernel to forget the file's cached pages (a cold read next)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def _loop(path: Path, update: Callable[[memoryview], None] | None) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            if update is not None:
                update(view[:n])


def _time(fn: Callable[[], object], repeat: int, cold: bool, path: Path) -> tuple[float, float]:
    """Best wall seconds and best CPU seconds (this process) of ``repeat`` runs."""
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        if cold:
            _drop(path)
        else:
            _loop(path, None)  # warm it
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu


def run(mib: int, repeat: int, folder: Path | None) -> dict[str, object]:
    rss0 = _rss_peak_mib()
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        path = Path(tmp) / "model.safetensors"
        _write(path, mib)
        size = path.stat().st_size
        methods: dict[str, Callable[[], object]] = {
            "read": lambda: _loop(path, None),
            "hashlib": lambda: _loop(path, hashlib.sha256().update),
            "store": lambda: HashStore(InspectCache(None)).digest(path, drop_cache=True),
            "store_addnet": lambda: HashStore(InspectCache(None)).digest(path, addnet=True, drop_cache=True),
        }
        results: dict[str, object] = {}
        for state in ("warm", "cold"):
            if state == "cold" and not _drop(path):
                continue
            timed = {name: _time(fn, repeat, state == "cold", path) for name, fn in methods.items()}
            results[state] = {
                name: {
                    "seconds": round(s, 3),
                    "mb_per_s": round(size / s / 1e6, 1),
                    # per CPU second of this process: the figure on an unshared machine
                    "mb_per_cpu_s": round(size / max(c, 1e-9) / 1e6, 1),
                    "vs_read": round(timed["read"][0] / s, 3),
                    "vs_hashlib": round(timed["hashlib"][0] / s, 3),
                }
                for name, (s, c) in timed.items()
            }
        rss = _rss_peak_mib()
    return {
        "bench": "hash_throughput",
        "file_bytes": size,
        "chunk_bytes": CHUNK,
        "repeat": repeat,
        "cpu": platform.processor() or platform.machine(),
        "sha_ni": _sha_ni(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "results": results,
        "rss_peak_growth_mib": round(rss - rss0, 1),
    }


def _sha_ni() -> bool | None:
    try:
        return " sha_ni" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mib", type=int, default=2048, help="file size in MiB (default 2048)")
    parser.add_argument("--repeat", type=int, default=2, help="best of N per method (default 2)")
    parser.add_argument("--folder", type=Path, default=None, help="where to write the file (default: temp)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.mib, args.repeat, args.folder), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
