"""``loadout generate``'s image prompts: ``--ip-adapter FILE:PICTURE[:WEIGHT[@START-END]]``
(repeatable) and ``--image-encoder FILE`` (the CLIP vision file every IP-Adapter reads with;
without it each adapter's is looked for beside it and in the sibling ``clip_vision`` folder)."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.commands.args import _split_paths
from core.errors import LoadoutError
from core.generate.workflow_request import IpAdapterUse
from core.values import IP_ADAPTER_PERCENT, IP_ADAPTER_WEIGHT


def add_image_prompt_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ip-adapter", action="append", default=[], metavar="FILE:PICTURE[:WEIGHT[@START-END]]",
        help="an image prompt (repeatable; SD1.5/SDXL IP-Adapter, as ComfyUI_IPAdapter_plus's "
        "IPAdapterAdvanced): the adapter file, the picture, its weight (default 1) and the part of the "
        "steps it acts on (e.g. ip-adapter_sd15.safetensors:cat.png:0.8@0-0.6)",
    )  # fmt: skip
    p.add_argument(
        "--image-encoder", metavar="FILE",
        help="the CLIP vision file the IP-Adapters read pictures with (default: the one of the right "
        "kind beside the adapter or in ComfyUI's models/clip_vision)",
    )  # fmt: skip


def _bad(text: str, why: str) -> LoadoutError:
    return LoadoutError(
        f"--ip-adapter {text!r} is not FILE:PICTURE[:WEIGHT[@START-END]]",
        why=why,
        fix="Give e.g. --ip-adapter ip-adapter_sd15.safetensors:cat.png:0.8@0-0.6",
        code="bad_argument",
    )


def parse_ip_adapter(text: str, encoder: str | None = None) -> IpAdapterUse:
    """``FILE:PICTURE[:WEIGHT[@START-END]]``; Windows drive letters stay part of the paths."""
    parts = _split_paths(text)
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise _bad(text, f"it has {len(parts)} parts")
    weight, start, end = 1.0, 0.0, 1.0
    if len(parts) == 3:
        number, at, span = parts[2].partition("@")
        weight = IP_ADAPTER_WEIGHT.parse(number) if number else 1.0
        if at:
            first, dash, last = span.partition("-")
            if not dash:
                raise _bad(text, f"{span!r} is not START-END")
            start, end = IP_ADAPTER_PERCENT.parse(first), IP_ADAPTER_PERCENT.parse(last)
    return IpAdapterUse(
        Path(parts[0]), Path(parts[1]), weight, start, end, Path(encoder) if encoder else None
    )
