"""``loadout upscale MODEL IMAGE -o OUT.png [--device D] [--vram-limit BYTES] [--tile N] [--json]``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from app.commands.args import DEVICE_HELP, default_device, parse_bytes
from core.errors import InterruptedByUser
from core.generate.upscale_file import UpscaleRequest, upscale_file
from core.upscale.tiled import SMALLEST_TILE, TILE


def register(sub: Any) -> None:
    p = sub.add_parser(
        "upscale",
        help="make a picture larger with an upscale model (ESRGAN, RealESRGAN, SwinIR, ...)",
        description="Runs the model over the picture in overlapping tiles, as ComfyUI's "
        "ImageUpscaleWithModel does, placed by the memory manager; writes a PNG.",
    )
    p.add_argument("model", metavar="MODEL", help="an upscale model file (.pth, .safetensors)")
    p.add_argument("image", metavar="IMAGE", help="the picture (PNG, JPEG, WebP)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--vram-limit", metavar="BYTES", help="e.g. 4GiB: the card size the manager sees")
    p.add_argument("--tile", type=int, default=TILE, help=f"tile size in input pixels (default {TILE})")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.tile < SMALLEST_TILE // 4:
        print(f"loadout: --tile must be at least {SMALLEST_TILE // 4}", file=sys.stderr)
        return 2
    request = UpscaleRequest(
        Path(args.model), Path(args.image), Path(args.output), args.device or default_device(),
        parse_bytes(args.vram_limit) if args.vram_limit else None, args.tile,
    )  # fmt: skip
    interrupt = threading.Event()

    def stop(signum: int, frame: object) -> None:
        interrupt.set()

    previous = signal.signal(signal.SIGINT, stop)
    try:
        result = upscale_file(request, interrupt=interrupt)
    except InterruptedByUser:
        print("\nloadout: stopped; no picture was written.", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(result.output)
        print(
            f"{result.architecture} x{result.scale}: {result.width}x{result.height}, {result.seconds:.2f} s",
            file=sys.stderr,
        )
    return 0
