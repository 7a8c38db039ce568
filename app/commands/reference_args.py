"""``loadout generate``'s editing arguments: the reference pictures (``--reference``, repeatable) and
whether they keep their own size (``--keep-reference-size``), and the settings they make."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_reference_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reference", action="append", default=[], metavar="PICTURE",
        help="editing: a reference picture (repeatable; FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit), scaled to "
        "about a megapixel as the family's ComfyUI template does",
    )  # fmt: skip
    p.add_argument(
        "--keep-reference-size", action="store_true",
        help="editing: encode each --reference picture at its own size (cropped to the VAE's multiple of 8 "
        "or 16 pixels) instead of the family's megapixel scaling, as ComfyUI's templates do without their "
        "scale node; the PNG parameters say 'Reference size: own'",
    )  # fmt: skip


def reference_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ImageSettings`` fields the editing arguments give."""
    return {
        "references": tuple(Path(t) for t in args.reference),
        "reference_own_size": args.keep_reference_size,
    }
