"""``loadout convert IN -o OUT [--dtype fp32|fp16|bf16|fp8_e4m3fn]``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

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
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    dtype = parse_dtype(args.dtype) if args.dtype else None
    out = convert_file(args.input, args.output, dtype)
    print(f"wrote {out}", file=sys.stderr)
    return 0
