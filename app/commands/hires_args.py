"""The hires fix's options of ``loadout generate``: ``--hires-scale S --hires-denoise D
[--hires-steps N] [--hires-upscaler METHOD_OR_FILE]``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.commands.args import number_type
from core.errors import LoadoutError
from core.generate.hires_settings import HiresFix
from core.generate.latent_upscale import LATENT_METHODS
from core.generate.parameters import HIRES_SCALE


def add_hires_arguments(p: Any) -> None:
    g = p.add_argument_group("hires fix", "a second pass at a larger size (ComfyUI's two-KSampler graph)")
    g.add_argument(
        "--hires-scale",
        type=number_type(HIRES_SCALE),
        metavar="S",
        help="e.g. 2: the picture's sides times S",
    )
    g.add_argument("--hires-denoise", type=float, metavar="D", help="the second pass's denoise (0.5)")
    g.add_argument("--hires-steps", type=int, metavar="N", help="the second pass's steps (default: --steps)")
    g.add_argument(
        "--hires-upscaler",
        default="nearest-exact",
        metavar="METHOD_OR_FILE",
        help="a latent method (" + ", ".join(LATENT_METHODS) + ") or an upscale model file (ESRGAN, ...)",
    )


def hires_from_arguments(args: argparse.Namespace) -> HiresFix | None:
    given = [args.hires_denoise, args.hires_steps]
    if args.hires_scale is None:
        if any(v is not None for v in given) or args.hires_upscaler != "nearest-exact":
            raise LoadoutError(
                "hires options were given without --hires-scale",
                why="the hires fix runs only when a scale is asked for",
                fix="Add --hires-scale S (e.g. 2), or leave the other --hires-* options out",
                code="bad_argument",
            )
        return None
    upscaler = args.hires_upscaler
    model = None if upscaler in LATENT_METHODS else Path(upscaler)
    if model is not None and not model.is_file():
        raise LoadoutError(
            f"{upscaler} is neither a latent upscale method nor a file",
            why="--hires-upscaler takes " + ", ".join(LATENT_METHODS) + ", or an upscale model file",
            fix="Check the method's spelling or the file's path",
            code="bad_argument",
        )
    denoise = 0.5 if args.hires_denoise is None else args.hires_denoise
    return HiresFix(
        args.hires_scale, denoise, args.hires_steps, "nearest-exact" if model else upscaler, model
    )
