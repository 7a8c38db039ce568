"""``loadout merge``: bake LoRAs into a copy of a model (``BASE --lora FILE[:MODEL[:CLIP]]...``), or
merge two or three models (``A B [C] --method weighted|add-difference|subtract|add [--ratio R]
[--blocks PREFIX=R,...] [--text-encoders R]``); ``-o OUT`` or ``--dry-run``, ``[--json] [--dtype D]``."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from app.commands.args import DEVICE_HELP, default_device, parse_blocks, parse_bytes, parse_lora
from app.commands.stopping import guarded_inputs, report_stop, stop_signals
from app.commands.words import cli_words
from app.terminal import for_terminal
from core.errors import InterruptedByUser, LoadoutError
from core.loading.convert_file import DTYPES, parse_dtype
from core.merging.merge import merge_models
from core.merging.recipe import MergeMethod, MergeRecipe
from core.merging.report import dry_run as models_dry_run
from core.merging.report import refusals
from core.patching.merge import dry_run, merge, refused
from core.session.compose import headless_placement


def register(sub: Any) -> None:
    p = sub.add_parser(
        "merge",
        help="bake LoRAs into a copy of a model, or merge two or three models",
        description="With --lora: bake a LoRA stack into a copy of BASE (same key layout). Without: merge "
        "models A B [C] of one family as ComfyUI's model-merging nodes do (weighted: A*R + B*(1-R), R "
        "being A's share; add-difference: A + (B - C)*R; subtract: (A - B)*R; add: A + B), per block "
        "with --blocks. With --dry-run, read headers only, report what would be done and what would be "
        "refused (exit 2 when it would).",
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="BASE for --lora; else A B [C]")
    p.add_argument("--lora", action="append", default=[], metavar="FILE[:MODEL[:CLIP]]")
    p.add_argument("--method", default="weighted", help="weighted, add-difference, subtract or add")
    p.add_argument(
        "--ratio", metavar="R",
        help="weighted: model A's share, 0..1 (1 keeps A, as ComfyUI's ratio); add-difference, subtract: "
        "the multiplier, -10..10 (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--blocks", metavar="BLOCK=R,...",
        help="per-block ratios; a block is the start of its keys, as in ComfyUI's ModelMergeBlocks "
        "(in=0.2,mid=0.5,out=0.8 or input_blocks.4.=0.3,double_blocks.7.=0)",
    )  # fmt: skip
    p.add_argument(
        "--text-encoders", metavar="R", help="merge the text encoders too, with this ratio (default: A's)"
    )
    p.add_argument("-o", "--output", metavar="OUT")
    p.add_argument("--dtype", choices=list(DTYPES), help="floating-point dtype of the output (default: keep)")
    p.add_argument("--device", default=None, help="where a model merge computes: " + DEVICE_HELP)
    p.add_argument("--vram-limit", metavar="BYTES", help="e.g. 4GiB: merge on a card of that size")
    p.add_argument(
        "--dry-run", action="store_true", help="write nothing; report what would be done and refused"
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


def _models_text(report: dict[str, Any]) -> str:
    recipe = report["recipe"]
    lines = [f"{recipe['method']} merge, ratio {recipe['ratio']:g}"]
    for m in report["models"]:
        lines.append(f"  {m['name']}: {m['path']} ({m['kind']}, {m['family']})")
    for b in report["blocks"]:
        lines.append(f"  block {b['prefix']}: ratio {b['ratio']:g} on {b['keys']} keys")
    if report["keys"]:
        lines.append(f"  {report['keys']['merged']} tensors merged, {report['keys']['copied']} kept from A")
    return "\n".join(lines)


def _print(report: dict[str, Any], as_json: bool, text: str) -> None:
    if as_json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(for_terminal(text))


def _recipe(args: argparse.Namespace) -> MergeRecipe:
    method = MergeMethod.parse(args.method)
    number = method.number
    if number is None:
        for flag, given in (("--ratio", args.ratio), ("--blocks", args.blocks)):
            if given is not None:
                raise LoadoutError(f"{flag} does not apply to add", why="add takes A + B whole",
                                   fix=f"Leave out {flag}", code="bad_argument")  # fmt: skip
        ratio = 1.0
    elif args.ratio is None and method is MergeMethod.WEIGHTED:
        raise LoadoutError("a weighted merge needs --ratio", why="it is model A's share (0..1)",
                           fix="Give e.g. --ratio 0.5", code="bad_argument")  # fmt: skip
    else:
        ratio = number.parse(args.ratio) if args.ratio is not None else 1.0
    blocks = parse_blocks(args.blocks, number) if args.blocks and number is not None else ()
    te = None
    if args.text_encoders is not None:
        te = number.parse(args.text_encoders) if number is not None else 1.0
    return MergeRecipe(method, ratio, blocks, te)


def _merge_models(args: argparse.Namespace) -> int:
    recipe = _recipe(args)
    dtype = parse_dtype(args.dtype) if args.dtype else None
    if args.dry_run:
        report = models_dry_run(args.models, recipe, args.output, dtype)
        _print(report, args.json, _models_text(report))
        for refusal in refusals(report):
            print(f"loadout: the merge would be refused: {for_terminal(cli_words(refusal['message']))}",
                  file=sys.stderr)  # fmt: skip
        return 2 if refusals(report) else 0
    if not args.output:
        raise LoadoutError("no output file", fix="Give -o OUT, or use --dry-run", code="bad_argument")
    interrupt = threading.Event()
    try:
        with stop_signals(interrupt), guarded_inputs([Path(m) for m in args.models], interrupt) as guard:

            def check() -> None:  # between tensors and slices: a changed input, then Ctrl-C
                guard.check()
                if interrupt.is_set():
                    raise InterruptedByUser("the merge was stopped")

            limit = parse_bytes(args.vram_limit) if args.vram_limit else None
            placement = headless_placement(args.device or default_device(), limit, interrupt)
            manager = placement.manager if placement is not None else None
            r = merge_models(args.models, recipe, args.output, dtype=dtype, manager=manager, check=check)
    except InterruptedByUser as exc:
        return report_stop(exc, "model")
    if args.json:
        events = placement.events.events() if placement is not None else ()
        out = {
            "output": str(r.path), "device": r.device, "chunk_bytes": r.chunk_bytes, "merged": r.merged,
            "copied": r.copied, "slices": r.slices, "events": [e.to_json() for e in events],
        }  # fmt: skip
        _print(out, True, "")
    print(f"wrote {r.path} ({r.merged} tensors merged, {r.copied} kept from A)", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    if not args.lora:
        return _merge_models(args)
    if len(args.models) != 1:
        raise LoadoutError(
            "a LoRA bake takes one base model", why=f"{len(args.models)} were given",
            fix="Give one BASE with --lora, or leave out --lora to merge models", code="bad_argument",
        )  # fmt: skip
    base = args.models[0]
    loras = [parse_lora(text) for text in args.lora]
    for lora in loras:
        if lora.on is not None:
            raise LoadoutError(
                f"--lora {lora.path.name}: a LoRA on the {lora.on} prompt only cannot be baked into a file",
                why="a merged file has one set of weights for every prompt",
                fix="Leave out on=, or use the LoRA in generate with on=",
                code="bad_argument",
            )
    if args.dry_run:
        report = dry_run(base, loras, force=args.force, out=args.output)
        _print(report, args.json, _text(report))
        for refusal in refused(report):  # the merge would stop here: exit as it would
            print(f"loadout: the merge would be refused: {for_terminal(cli_words(refusal['message']))}",
                  file=sys.stderr)  # fmt: skip
        return 2 if refused(report) else 0
    if not args.output:
        raise LoadoutError("no output file", fix="Give -o OUT, or use --dry-run", code="bad_argument")
    with guarded_inputs([Path(base), *(a.path for a in loras)]):
        out = merge(
            base,
            loras,
            args.output,
            dtype=parse_dtype(args.dtype) if args.dtype else None,
            force=args.force,
        )
    print(f"wrote {out}", file=sys.stderr)
    return 0
