"""Benchmark: what placement-independent results cost (issue 11), for the two designs.

A resident CPU layer computes with the file's memory-mapped view, at the file's offset; a streamed
layer with a copy. For the two to give the same bits either

* **A**: every file tensor not 64-byte aligned is copied once into an aligned buffer at load
  (zero-copy kept for the aligned ones), or
* **B** (what Loadout does, ``core/ops/alignment.py``): every same-device copy keeps its source's
  address modulo 64.

Measured here, in one run:

1. ``layouts``: how many tensors (and bytes) of full-size SD1.5 / SDXL checkpoints sit off a
   16/32/64-byte boundary. The offsets are those of the reference writer (``safetensors`` 0.8:
   tensors sorted by element size, then name; header padded to 8 bytes), computed from the real
   key layouts with true shapes; where the data area starts modulo 64 depends on the header's
   length (the metadata), so every possible start (0, 8, ..., 56) is reported. Also Loadout's
   own writer (data area on a 64-byte boundary, the source's order).
2. ``copy_at_load`` (design A): seconds to copy a warm memory-mapped file into aligned buffers,
   per GiB, against creating the zero-copy views (the same file, the same run).
3. ``streamed_copy`` (design B): a streamed forward's copies made at the source's residue against
   plain ``tensor.to(copy=True)``, on SD1.5 UNet-sized weights: time ratio and extra bytes.
4. ``compute``: ``F.linear`` with a 64-byte-aligned weight against the same weight 4 bytes off,
   one row and 77 rows (does alignment cost speed on this CPU?).

Prints one JSON object. ``python -m bench.alignment [--mib 256] [--repeat 5]``. Uses one torch
thread (the machine is shared) and under ~2x ``--mib`` of memory.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from core.ops.alignment import copy_keeping_alignment  # noqa: E402

ITEMSIZE = {"F32": 4, "F16": 2, "I64": 8}
BOUNDARIES = (16, 32, 64)


# --- 1. where real layouts put their tensors ---------------------------------------------------


def _files() -> dict[str, list[tuple[str, str, int]]]:
    """kind -> [(name, dtype, nbytes)] of full-size checkpoints as commonly distributed: SD1.5 in
    fp32 (``v1-5-pruned-emaonly``) and fp16, SDXL base in fp16; CLIP's position_ids are int64."""
    from tests.fixtures import layouts_diffusion as ld

    def spec(layout: Mapping[str, Any], floats: str) -> list[tuple[str, str, int]]:
        out = []
        for name, shape in layout.items():
            dtype = "I64" if name.endswith("position_ids") else floats
            out.append((name, dtype, math.prod(shape) * ITEMSIZE[dtype]))
        return out

    return {
        "sd15_fp32": spec(ld.sd1_checkpoint(), "F32"),
        "sd15_fp16": spec(ld.sd1_checkpoint(), "F16"),
        "sdxl_fp16": spec(ld.sdxl_checkpoint(), "F16"),
    }


def _offsets(tensors: list[tuple[str, str, int]], *, reference_order: bool) -> list[tuple[int, int]]:
    """(offset in the data area, nbytes) per tensor in the order a writer puts them."""
    order = sorted(tensors, key=lambda t: (-ITEMSIZE[t[1]], t[0])) if reference_order else tensors
    out, cursor = [], 0
    for _, _, n in order:
        out.append((cursor, n))
        cursor += n
    return out


def _share_off(spans: list[tuple[int, int]], start: int, boundary: int) -> dict[str, float]:
    off = [(o, n) for o, n in spans if (start + o) % boundary]
    total = sum(n for _, n in spans)
    return {"tensors": round(len(off) / len(spans), 4), "bytes": round(sum(n for _, n in off) / total, 4)}


def layouts() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, tensors in _files().items():
        ref = _offsets(tensors, reference_order=True)
        per_start = {
            str(start): {str(b): _share_off(ref, start, b) for b in BOUNDARIES} for start in range(0, 64, 8)
        }
        starts_off = [s for s in range(0, 64, 8) if per_start[str(s)]["64"]["bytes"] > 0.5]
        own = _offsets(tensors, reference_order=False)
        out[kind] = {
            "tensors": len(tensors),
            "gib": round(sum(n for _, _, n in tensors) / 2**30, 3),
            "reference_writer_by_data_start_mod_64": per_start,
            "data_starts_leaving_most_bytes_off_64": f"{len(starts_off)} of 8",
            "loadout_writer": {str(b): _share_off(own, 0, b) for b in BOUNDARIES},
        }
    return out


# --- 2. design A: copying misaligned tensors at load --------------------------------------------


def _median(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_at_load(mib: int, repeat: int) -> dict[str, Any]:
    nbytes = mib << 20
    chunk = 10 << 20  # SD-sized tensors: 10 MiB each, 4 bytes off a 64-byte boundary
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.bin"
        block = torch.randn(chunk // 4).numpy().tobytes()
        with open(path, "wb") as fh:
            fh.write(b"\0" * 4)
            for _ in range(nbytes // chunk):
                fh.write(block)
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
        n = nbytes // chunk
        mm.read()  # warm: the page cache holds the file, as after a first load

        def views() -> list[torch.Tensor]:
            return [
                torch.frombuffer(mm, dtype=torch.float32, count=chunk // 4, offset=4 + i * chunk)
                for i in range(n)
            ]

        def copies() -> list[torch.Tensor]:
            return [v.clone() for v in views()]

        t_views = _median(views, repeat)
        t_copies = _median(copies, repeat)
    gib = n * chunk / 2**30
    return {
        "gib": round(gib, 3),
        "views_seconds": t_views,
        "copies_seconds": t_copies,
        "copy_seconds_per_gib": round(t_copies / gib, 4),
        "extra_ram_bytes_per_gib_copied": 2**30,
    }


# --- 3. design B: streamed copies at the source's residue ---------------------------------------


def streamed_copy(repeat: int) -> dict[str, Any]:
    # one SD1.5 transformer block's weights (fp16): q, k, v, out, ff in/out, and biases
    shapes = (
        [(320, 320)] * 4 + [(2560, 320), (320, 1280), (320,), (2560,)] + [(640, 640)] * 4 + [(1280, 1280)] * 4
    )
    sources = []
    for i, shape in enumerate(shapes):
        t = torch.randn(shape).half()
        buf = torch.empty(t.nbytes + 64, dtype=torch.uint8)
        start = (4 + 2 * i - buf.data_ptr()) % 64  # residues 4, 6, 8, ...: off the line
        src = buf[start : start + t.nbytes].view(torch.float16).view(shape)
        src.copy_(t)
        sources.append(src)
    total = sum(s.nbytes for s in sources)
    plain = lambda: [s.to("cpu", copy=True) for s in sources]  # noqa: E731
    kept = lambda: [copy_keeping_alignment(s) for s in sources]  # noqa: E731
    plain()
    kept()  # first touches out of the way
    t_plains, t_kepts = [], []
    for i in range(4 * repeat):  # interleaved, alternating which goes first
        first, second = (plain, kept) if i % 2 == 0 else (kept, plain)
        a, b = _median(first, 5), _median(second, 5)
        t_plains.append(a if first is plain else b)
        t_kepts.append(b if first is plain else a)
    t_plain, t_kept = statistics.median(t_plains), statistics.median(t_kepts)
    extra = sum(copy_keeping_alignment(s).untyped_storage().nbytes() - s.nbytes for s in sources)
    return {
        "tensors": len(sources),
        "bytes": total,
        "plain_copy_seconds": t_plain,
        "residue_copy_seconds": t_kept,
        "ratio": round(t_kept / t_plain, 3),
        "extra_bytes": extra,
        "extra_bytes_per_tensor_max": 64,
    }


# --- 4. does alignment cost compute speed? ------------------------------------------------------


def compute(repeat: int) -> dict[str, Any]:
    out = {}
    w = torch.randn(1280, 1280)
    buf = torch.empty(w.nbytes + 128, dtype=torch.uint8)
    start = (4 - buf.data_ptr()) % 64
    off = buf[start : start + w.nbytes].view(torch.float32).view(w.shape)
    off.copy_(w)
    for rows in (1, 77):
        x = torch.randn(rows, 1280)
        loops = 2000 if rows == 1 else 100
        aligned = lambda: [F.linear(x, w) for _ in range(loops)]  # noqa: E731, B023
        shifted = lambda: [F.linear(x, off) for _ in range(loops)]  # noqa: E731, B023
        rounds = [(_median(aligned, 3), _median(shifted, 3)) for _ in range(repeat)]
        a = statistics.median(r[0] for r in rounds) / loops
        s = statistics.median(r[1] for r in rounds) / loops
        out[f"linear_1280x1280_{rows}_rows"] = {
            "aligned_us": round(a * 1e6, 2),
            "off_by_4_us": round(s * 1e6, 2),
            "ratio": round(s / a, 3),
            "same_bits": bool(torch.equal(F.linear(x, w), F.linear(x, off))),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="size of the file copied in design A")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    result = {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "layouts": layouts(),
        "copy_at_load": copy_at_load(args.mib, args.repeat),
        "streamed_copy": streamed_copy(args.repeat),
        "compute": compute(args.repeat),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
