"""``loadout inspect [--json] PATH...``: what each model file is, from its header alone."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.lora_words import CONTROL_WORDS, trained_scale_text
from app.terminal import for_terminal
from core.detect.types import TrainedScale
from core.inspect import InspectResult, expand_paths, inspect_file


def register(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="say what model files are (headers only)",
        description="Say what each model file is, reading its header only. Folders are walked recursively.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="model files or folders")
    p.add_argument("--json", action="store_true", help="print one JSON array (the documented contract)")
    p.set_defaults(handler=run)


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    return f"{n} B"


def _params(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.1f}K"


def merge_recipe_text(recipe: dict[str, Any]) -> str:
    """``weighted 0.3 (in=0.2, out=0.9) of A: a.safetensors [86c0ad93d669], B: ...``"""
    blocks = ", ".join(f"{k}={v:g}" for k, v in (recipe.get("blocks") or {}).items())
    inputs = ", ".join(f"{i['model']}: {i['file']} [{i['sha256']}]" for i in recipe.get("inputs") or ())
    te = recipe.get("text_encoders")
    return (
        f"{recipe['method']} {recipe['ratio']:g}" + (f" ({blocks})" if blocks else "")
        + (f", text encoders {te:g}" if te is not None else "") + f" of {inputs}"
        + f"; Loadout {recipe.get('loadout', '?')}"
    )  # fmt: skip


def format_table(results: list[InspectResult]) -> str:
    lines: list[str] = []
    for r in results:
        j = r.to_json()
        lines.append(str(r.path))
        if r.error is not None:
            lines.append(f"  error     {r.error.message}")
            lines.append("")
            continue
        family = j["family"] or "-"
        variant = f" ({j['variant']})" if j["variant"] else ""
        size = _human_size(j["metadata"].get("loadout.file_size", 0))
        lines.append(
            f"  kind      {j['kind']}   family {family}{variant}   {j['format']}, {j['layout']}, {size}"
        )
        for c in j["components"]:
            prefix = c["prefix"] or "(whole file)"
            lines.append(
                f"  {c['role']:<16} {c['family']:<14} {_params(c['params']):>8} params  "
                f"{_human_size(c['bytes']):>9}  {c['dtype']:<10} {prefix}"
            )
        for part, q in (j["metadata"].get("loadout.quantization") or {}).items():
            lines.append(
                f"  quant     {q['types']}, {_human_size(q['bytes'])}, {q['bits_per_weight']:.2f} bits/weight"
                + (f"  ({part})" if part else "")
            )
        lora = j["lora"]
        if lora:
            targets = ", ".join(f"{k}: {v}" for k, v in lora["targets"].items())
            lines.append(
                f"  lora      {lora['format']}, {'+'.join(lora['algorithms'])}, rank {lora['rank']}, "
                f"{lora['modules']} modules ({targets})"
            )
            if lora.get("control") in CONTROL_WORDS:
                lines.append(f"  control   {CONTROL_WORDS[lora['control']]}")
            scales = [TrainedScale.from_json(t) for t in lora.get("trained_scale") or ()]
            if scales:
                lines.append(f"  alpha     {trained_scale_text(scales)}")
        recipe = j["metadata"].get("loadout.merge_recipe")
        if recipe:
            lines.append(f"  merged    {merge_recipe_text(recipe)}")
        words = j["metadata"].get("loadout.trigger_words")
        if words:
            lines.append(f"  triggers  {', '.join(words)}")
        preview = j["metadata"].get("loadout.preview")
        if preview:
            lines.append(f"  preview   {preview}")
        for w in j["warnings"]:
            lines.append(f"  note      {w}")
        lines.append("")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    results = [inspect_file(p) for p in expand_paths(args.paths)]
    if args.json:
        json.dump([r.to_json() for r in results], sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(for_terminal(format_table(results)))
    return 0 if all(r.ok for r in results) else 1
