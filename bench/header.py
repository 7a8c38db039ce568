"""Benchmark: reading a safetensors header of very many tensors, against the bare JSON parse.

A file of N one-byte tensors (the header is most of the file: ~45 bytes of JSON per tensor) is
written once per size; then, in the same run, the best of ``--repeat`` wall times of:

* ``json_loads``: ``json.loads`` of the header bytes alone (the floor any reader pays);
* ``safetensors``: ``safetensors.safe_open(path, "pt")`` and its key list (the reference reader);
* ``loadout``: ``core.files.safetensors.read_header(path)``: the header read, parsed and every
  entry checked (dtypes, shapes, offsets contiguous and in bounds).

Prints one JSON object with the seconds and the ratios against ``json_loads``. It replaces the
suite's old timed assertion ("a million tensors in under 30 s"): tests check what is read, this
measures how fast. Usage: ``python -m bench.header [--tensors 100000,1000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from safetensors import safe_open

from core.files.safetensors import read_header


def _write(path: Path, n: int) -> bytes:
    entries = {f"t{i}": {"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]} for i in range(n)}
    body = json.dumps(entries, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    with open(path, "wb") as f:
        f.write(len(body).to_bytes(8, "little") + body + b"\0" * n)
    return body


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _keys(path: Path) -> int:
    with safe_open(str(path), "pt") as f:
        return len(list(f.keys()))


def run(sizes: list[int], repeat: int) -> dict[str, object]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"many_{n}.safetensors"
            body = _write(path, n)
            assert len(read_header(path).tensors) == n
            row: dict[str, object] = {"tensors": n, "header_mb": round(len(body) / 1e6, 2)}
            row["json_loads_s"] = round(_best(lambda b=body: json.loads(b), repeat), 4)
            row["safetensors_s"] = round(_best(lambda p=path: _keys(p), repeat), 4)
            row["loadout_s"] = round(_best(lambda p=path: read_header(p), repeat), 4)
            base = float(row["json_loads_s"])  # type: ignore[arg-type]
            row["loadout_vs_json"] = round(float(row["loadout_s"]) / base, 2)  # type: ignore[arg-type]
            row["safetensors_vs_json"] = round(float(row["safetensors_s"]) / base, 2)  # type: ignore[arg-type]
            rows.append(row)
            path.unlink()
    return {
        "bench": "header",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "repeat": repeat,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", default="100000,1000000", help="comma-separated tensor counts")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.tensors.split(",") if s]
    print(json.dumps(run(sizes, args.repeat), indent=2))


if __name__ == "__main__":
    main()
