"""``loadout check [--json] PATH...``: does each file match its architecture? (no data read)"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.terminal import for_terminal
from core.inspect import expand_paths
from core.loading.check import check_file


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="compare files with their architectures (headers only)",
        description="Build each component's network on the meta device and compare it with the file: "
        "missing and unexpected keys, wrong shapes. Reads no tensor data.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="model files or folders")
    p.add_argument("--json", action="store_true", help="print JSON (one object, or an array for several)")
    p.add_argument(
        "--values",
        action="store_true",
        help="also read every tensor and name those holding NaN or infinite values (reads the whole file)",
    )
    p.set_defaults(handler=run)


def _scan(rec: dict[str, Any], quiet: bool) -> None:
    """``--values``: the file's non-finite tensors into ``rec`` (``nonfinite``), with a progress line."""
    from core.errors import LoadoutError
    from core.loading.values_scan import nonfinite_tensors

    def show(done: int, total: int) -> None:
        if not quiet and (done == total or done % 16 == 0):
            print(f"\rvalues {done}/{total} tensors", end="", file=sys.stderr, flush=True)

    try:
        bad = nonfinite_tensors(rec["path"], show)
    except LoadoutError as exc:
        rec["ok"] = False
        rec["error"] = rec.get("error") or exc.to_json()
        return
    if not quiet:
        print(file=sys.stderr)
    rec["nonfinite"] = bad
    if bad:
        rec["ok"] = False


def _text(rec: dict[str, Any]) -> str:
    lines = [f"{rec['path']}: {'ok' if rec['ok'] else 'NOT OK'} ({rec['family'] or 'unknown family'})"]
    bad = rec.get("nonfinite") or []
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        lines.append(f"  values {len(bad)} tensor(s) hold NaN or infinite values: {', '.join(bad[:5])}{more}")
    if rec.get("error"):
        lines.append(f"  error  {rec['error']['message']}")
    for c in rec["components"]:
        status = (
            "ok" if not (c["missing"] or c["unexpected"] or c["shape_mismatches"] or c.get("error")) else "!!"
        )
        lines.append(f"  {status} {c['role']:<16} {c['family']:<14} {c['prefix'] or '(whole file)'}")
        if c.get("error"):
            lines.append(f"     {c['error']['message']}")
        for label in ("missing", "unexpected", "shape_mismatches"):
            for item in c[label][:10]:
                lines.append(f"     {label}: {item}")
            if len(c[label]) > 10:
                lines.append(f"     ... {len(c[label]) - 10} more {label}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    records = [check_file(p) for p in expand_paths(args.paths)]
    if args.values:
        for rec in records:
            _scan(rec, args.json)
    if args.json:
        payload: Any = records[0] if len(records) == 1 else records
        json.dump(payload, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(for_terminal("\n\n".join(_text(r) for r in records)) + "\n")
    return 0 if all(r["ok"] for r in records) else 1
