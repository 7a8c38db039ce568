"""``loadout merge BASE --lora FILE[:MODEL[:CLIP]]... (-o OUT | --dry-run) [--json] [--dtype D]``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.commands.args import parse_lora
from app.commands.stopping import guarded_inputs
from app.commands.words import cli_words
from app.terminal import for_terminal
from core.errors import LoadoutError
from core.loading.convert_file import DTYPES, parse_dtype
from core.patching.merge import dry_run, merge, refused


def register(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="bake LoRAs into a copy of a model",
        description="Bake a LoRA stack into a copy of BASE (same key layout). With --dry-run, read headers "
        "and LoRA factors only, report how each LoRA maps onto BASE and what the merge would refuse "
        "(exit 2 when it would).",
    )
    p.add_argument("base", metavar="BASE")
    p.add_argument("--lora", action="append", default=[], metavar="FILE[:MODEL[:CLIP]]", required=True)
    p.add_argument("-o", "--output", metavar="OUT")
    p.add_argument("--dtype", choices=list(DTYPES), help="floating-point dtype of the copy (default: keep)")
    p.add_argument(
        "--dry-run", action="store_true", help="write nothing; report the matches and what merge would refuse"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--force", action="store_true", help="apply a LoRA made for another model family anyway")
    p.set_defaults(handler=run)


def _text(report: dict[str, Any]) -> str:
    lines = [f"base {report['base']['path']} ({report['base']['family']})"]
    for lo in report["loras"]:
        lines.append(
            f"  {lo['path']}: {lo['format']} for {lo['base_family']}, "
            f"{lo['matched']}/{lo['modules']} modules match, {len(lo['unmatched'])} unmatched, "
            f"{len(lo['shape_mismatches'])} wrong shape"
        )
        for name in lo["unmatched"][:5]:
            lines.append(f"    unmatched: {name}")
        for item in lo["shape_mismatches"][:5]:
            lines.append(f"    shape: {item}")
        for item in lo["skipped"][:5]:
            lines.append(f"    skipped: {item}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    loras = [parse_lora(text) for text in args.lora]
    if args.dry_run:
        report = dry_run(args.base, loras, force=args.force, out=args.output)
        if args.json:
            json.dump(report, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            print(for_terminal(_text(report)))
        for refusal in refused(report):  # the merge would stop here: exit as it would
            print(f"loadout: the merge would be refused: {for_terminal(cli_words(refusal['message']))}",
                  file=sys.stderr)  # fmt: skip
        return 2 if refused(report) else 0
    if not args.output:
        raise LoadoutError("no output file", fix="Give -o OUT, or use --dry-run", code="bad_argument")
    with guarded_inputs([Path(args.base), *(a.path for a in loras)]):
        out = merge(
            args.base,
            loras,
            args.output,
            dtype=parse_dtype(args.dtype) if args.dtype else None,
            force=args.force,
        )
    print(f"wrote {out}", file=sys.stderr)
    return 0
