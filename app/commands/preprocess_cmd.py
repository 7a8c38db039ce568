"""``loadout preprocess NAME IMAGE -o OUT.png [--set KEY=VALUE]...``: a ControlNet hint from a picture."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.commands.args import DEVICE_HELP, default_device, parse_bytes
from core.errors import LoadoutError
from core.generate.hint_file import write_hint
from core.preprocess import PREPROCESSORS


def _describe() -> str:
    lines = []
    for p in PREPROCESSORS.values():
        settings = ", ".join(f"{s.name}={s.default:g}" for s in p.settings)
        lines.append(f"{p.name}: {p.description}" + (f" (settings: {settings})" if settings else ""))
    return "; ".join(lines)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "preprocess",
        help="make a ControlNet hint (canny, lineart, softedge, depth, normal, openpose, openpose_full ..., "
        "normalbae, dwpose) from a picture",
        description="Writes the hint picture a ControlNet takes. " + _describe() + ".",
    )
    p.add_argument("name", metavar="NAME", help="the preprocessor: " + ", ".join(PREPROCESSORS))
    p.add_argument("image", metavar="IMAGE", help="the picture (PNG, JPEG, WebP)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a setting of the preprocessor (repeatable), e.g. --set low=50 --set high=150",
    )  # fmt: skip
    p.add_argument(
        "--model", action="append", default=[], metavar="FILE",
        help="the model file of a preprocessor that needs one, repeatable (depth: a Depth Anything V2 "
        ".safetensors; openpose: body_pose_model converted to .safetensors; openpose_full, openpose_hand, "
        "openpose_face: that and hand_pose_model and/or facenet converted; normalbae: scannet.pt converted; "
        "dwpose: yolox_l.onnx and dw-ll_ucoco_384.onnx)",
    )  # fmt: skip
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument("--vram-limit", metavar="BYTES", help="e.g. 4GiB: the card size the manager sees")
    p.set_defaults(handler=run)


def parse_settings(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[key.strip()] = float(value)
        except ValueError:
            raise LoadoutError(
                f"--set {item!r} is not KEY=NUMBER",
                fix="Give e.g. --set low=50",
                code="bad_argument",
            ) from None
    return out


def run(args: argparse.Namespace) -> int:
    out = write_hint(
        args.name, Path(args.image), Path(args.output), parse_settings(args.set),
        models=[Path(m) for m in args.model], device=args.device or default_device(),
        vram_limit=parse_bytes(args.vram_limit) if args.vram_limit else None,
    )  # fmt: skip
    print(out)
    return 0
