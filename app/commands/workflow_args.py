"""``loadout generate``'s workflow arguments: img2img's strength, the hires fix, ControlNets,
guidance patches, LoRA schedules, regions, inpainting and outpainting, references, FLUX Redux's
image prompts and the SDXL refiner."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.commands.args import int_type, number_type, parse_redux
from app.commands.hires_args import add_hires_arguments
from core.generate.outpaint_settings import DEFAULT_FEATHERING, FEATHERING
from core.guidance import PATCHES
from core.values import DENOISE, REFINER_SWITCH


def add_workflow_arguments(p: argparse.ArgumentParser) -> None:
    """Img2img, the hires fix, ControlNets, inpainting and the SDXL refiner."""
    p.add_argument("--denoise", type=number_type(DENOISE), default=1.0, help="img2img strength (with --init)")
    add_hires_arguments(p)
    p.add_argument(
        "--controlnet", action="append", default=[],
        metavar="FILE:HINT[:PREPROCESSOR][:STRENGTH[:START:END]]",
        help="a ControlNet and its hint picture (repeatable; ComfyUI's ControlNetApplyAdvanced); with a "
        "preprocessor (canny, lineart, softedge) the hint is made from that picture",
    )  # fmt: skip
    p.add_argument(
        "--patch", action="append", default=[], metavar="NAME[:ARG=VALUE,...]",
        help="a guidance patch, repeatable, applied in order: " + ", ".join(PATCHES)
        + " (e.g. pag:scale=3, freeu_v2, deep_shrink:downscale_factor=1.5)",
    )  # fmt: skip
    p.add_argument(
        "--lora-schedule", action="append", default=[], metavar="NAME=MULT@START,...",
        help="a LoRA's strength over the steps (repeatable): its strength times MULT from START (0..1 "
        "of the sampling) on, as ComfyUI's hook keyframes (e.g. detail=1@0,0.5@0.4,0@0.8)",
    )  # fmt: skip
    p.add_argument(
        "--region", action="append", default=[], metavar="X,Y,W,H[:STRENGTH][@START-END]=PROMPT",
        help="a part of the picture drawn from its own prompt (repeatable; ComfyUI's ConditioningSetArea, "
        "SetTimestepRange and Combine): the box in pixels, or in fractions with a decimal point",
    )  # fmt: skip
    p.add_argument("--regions", metavar="FILE", help="regions from a JSON file (boxes, masks: docs/cli.md)")
    p.add_argument("--mask", metavar="MASK", help="inpainting: white = repaint (with --init and --denoise)")
    p.add_argument(
        "--outpaint", metavar="LEFT,TOP,RIGHT,BOTTOM",
        help="outpainting: grow the --init picture by these pixels (ComfyUI's ImagePadForOutpaint), then "
        "paint the new border",
    )  # fmt: skip
    p.add_argument(
        "--feather", type=int_type(FEATHERING), default=DEFAULT_FEATHERING, metavar="PIXELS",
        help=f"outpainting: how far the mask fades into the picture (default {DEFAULT_FEATHERING})",
    )  # fmt: skip
    p.add_argument(
        "--reference", action="append", default=[], metavar="PICTURE",
        help="editing: a reference picture (repeatable; FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit)",
    )  # fmt: skip
    p.add_argument(
        "--redux", action="append", default=[], metavar="FILE:PICTURE[:STRENGTH]",
        help="an image prompt by FLUX Redux (repeatable, appended in order; ComfyUI's StyleModelApply): "
        "the style model file, its picture and strength (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--image-encoder", metavar="FILE",
        help="the image encoder image prompts read pictures with (FLUX Redux: "
        "sigclip_vision_patch14_384.safetensors; default: the library's or ComfyUI's models/clip_vision)",
    )  # fmt: skip
    p.add_argument("--refiner", metavar="FILE", help="the SDXL refiner checkpoint to finish the picture")
    p.add_argument(
        "--refiner-switch", type=number_type(REFINER_SWITCH), default=0.8,
        help="fraction of the steps before the refiner",
    )  # fmt: skip


def image_prompt_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``ImageSettings``' image-prompt fields from ``--redux`` and ``--image-encoder``."""
    return {
        "redux": tuple(parse_redux(t) for t in args.redux),
        "image_encoder": Path(args.image_encoder) if args.image_encoder else None,
    }
