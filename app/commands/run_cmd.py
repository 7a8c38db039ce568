"""``loadout run MODEL [--lora F[:M[:C]]]... [--steps N] [--size WxH] [--batch B] [--seed S]
[--device D] [--vram-limit BYTES] [--dtype D] --json``: the headless test run."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from app.commands.args import (
    BYTES,
    DEVICE_HELP,
    default_device,
    int_type,
    parse_bytes,
    parse_lora,
    parse_size,
)
from app.commands.stopping import guarded_inputs, stop_signals
from core.errors import InterruptedByUser
from core.loading.convert_file import DTYPES, parse_dtype
from core.memory.policy import MemorySettings, VramState
from core.run.command import RunRequest, run_model
from core.session.testrun import RunConfig
from core.units import in_gib
from core.values import BATCH, RUN_STEPS, SEED


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="time N denoising passes of a model through the memory manager",
        description="Load MODEL (and LoRAs), place it through the memory manager and run N forward "
        "passes on seeded inputs of the family's real shapes. --vram-limit simulates a card of "
        "that size (on the CPU too). Ctrl-C stops within one layer.",
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--lora", action="append", default=[], metavar="FILE[:MODEL[:CLIP]]")
    p.add_argument("--steps", type=int_type(RUN_STEPS), default=4)
    p.add_argument("--size", default="512x512", metavar="WxH")
    p.add_argument("--batch", type=int_type(BATCH), default=1)
    p.add_argument("--seed", type=int_type(SEED), default=0)
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--vram-limit", metavar="BYTES", help="e.g. 4GiB: the budget the manager sees")
    p.add_argument(
        "--dtype", choices=list(DTYPES), default="fp32",
        help="compute dtype (default fp32); fp8_e4m3fn: fp8 matmul where the card has it (CC 8.9+)",
    )  # fmt: skip
    p.add_argument(
        "--vram-mode", choices=[s.option for s in VramState], help="override the automatic VRAM state"
    )
    p.add_argument(
        "--reserve", metavar="BYTES", help="VRAM kept free for other programs (default: automatic)"
    )
    p.add_argument(
        "--inference-memory", metavar="BYTES", help="VRAM kept for activations (default 0.8 GiB + reserve)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    width, height = parse_size(args.size)
    request = RunRequest(
        model=Path(args.model),
        loras=tuple(parse_lora(t) for t in args.lora),
        config=RunConfig(args.steps, width, height, args.batch, args.seed, parse_dtype(args.dtype)),
        device=args.device or default_device(),
        vram_limit=parse_bytes(args.vram_limit) if args.vram_limit else None,
        settings=MemorySettings(
            vram_state=VramState.parse(args.vram_mode) if args.vram_mode else None,
            reserve_bytes=parse_bytes(args.reserve, BYTES) if args.reserve else None,
            min_inference_bytes=parse_bytes(args.inference_memory, BYTES) if args.inference_memory else None,
        ),
    )
    interrupt = threading.Event()
    try:
        inputs = (request.model, *(a.path for a in request.loras))
        with stop_signals(interrupt), guarded_inputs(inputs, interrupt):  # checked per tensor and layer
            report = run_model(request, interrupt=interrupt)
    except InterruptedByUser:
        print("loadout: stopped within one layer; nothing was left half-changed.", file=sys.stderr)
        return 130
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        out = report["output"]
        print(
            f"{report['family']} on {report['device']}: {report['seconds_per_step']} s/step, "
            f"{in_gib(report['resident_bytes'])} resident, "
            f"{in_gib(report['streamed_bytes_per_step'])} streamed per step, "
            f"output sha256 {out['sha256'][:16]}"
        )
        for e in report["events"]:
            print(f"  {e['kind']}: {e['reason']}")
    return 0
