"""``loadout convert IN -o OUT [--dtype fp32|fp16|bf16|fp8_e4m3fn]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.commands.stopping import guarded_inputs
from core.files.writer import WriteProgress
from core.loading.convert_file import DTYPES, convert_file, parse_dtype


def register(sub: Any) -> None:
    p = sub.add_parser(
        "convert",
        help="change a model's dtype, or turn a .ckpt/.pt into .safetensors",
        description="Write a converted copy (atomic; the input is never modified).",
    )
    p.add_argument("input", metavar="IN")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the .safetensors file to write")
    p.add_argument("--dtype", choices=list(DTYPES), help="floating-point dtype of the copy (default: keep)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    dtype = parse_dtype(args.dtype) if args.dtype else None

    def show(p: WriteProgress) -> None:
        if not args.quiet:
            print(
                f"\rconvert {p.tensors_done}/{p.tensors_total} tensors", end="", file=sys.stderr, flush=True
            )

    with guarded_inputs([Path(args.input)]) as guard:
        out = convert_file(args.input, args.output, dtype, progress=show, check=guard.check)
    print(f"\nwrote {out}" if not args.quiet else f"wrote {out}", file=sys.stderr)
    return 0
