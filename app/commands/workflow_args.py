"""``loadout generate``'s workflow arguments: img2img's strength, the hires fix, ControlNets,
guidance patches, LoRA schedules, regions, inpainting and outpainting, references and the SDXL
refiner."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.commands.args import int_type, number_type, parse_control_picture, parse_controlnet
from app.commands.hires_args import add_hires_arguments
from app.commands.image_prompt_args import add_image_prompt_arguments
from app.commands.reference_args import add_reference_arguments
from core.generate.outpaint_settings import DEFAULT_FEATHERING, FEATHERING
from core.guidance import PATCHES
from core.values import DENOISE, REFINER_SWITCH


def add_workflow_arguments(p: argparse.ArgumentParser) -> None:
    """Img2img, the hires fix, ControlNets, inpainting and the SDXL refiner."""
    p.add_argument("--denoise", type=number_type(DENOISE), default=1.0, help="img2img strength (with --init)")
    add_hires_arguments(p)
    p.add_argument(
        "--controlnet", action="append", default=[],
        metavar="FILE:HINT[:PREPROCESSOR][:STRENGTH[:START:END]][:type=NAME]",
        help="a ControlNet and its hint picture (repeatable; ComfyUI's ControlNetApplyAdvanced); with a "
        "preprocessor (canny, lineart, softedge, depth, normal, openpose, openpose_full ..., normalbae, "
        "dwpose) the hint is made from that picture; type=NAME picks a union ControlNet's control type "
        "(e.g. type=depth); FILE alone (or an empty HINT, FILE::0.8): a Z-Image Fun 2.x net inpainting "
        "on --init and --mask with no hint",
    )  # fmt: skip
    p.add_argument(
        "--control-picture", metavar="PICTURE[:PREPROCESSOR]",
        help="the control picture of FLUX.1 Canny/Depth [dev] or of a FLUX.1 control LoRA (ComfyUI's "
        "InstructPixToPixConditioning); with a preprocessor (canny, depth ...) it is made from that picture",
    )  # fmt: skip
    p.add_argument(
        "--preprocessor-model", action="append", default=[], metavar="FILE",
        help="the model file a preprocessor uses (depth: a Depth Anything V2 .safetensors, openpose: "
        "an OpenPose body .safetensors, openpose_full: also the hand and face ones, normalbae: NormalBAE's "
        "scannet.pt as .safetensors, dwpose: yolox_l.onnx and dw-ll_ucoco_384.onnx; repeatable, "
        "one per kind); without it the first of its kind in the library is used",
    )  # fmt: skip
    add_image_prompt_arguments(p)
    p.add_argument(
        "--patch", action="append", default=[], metavar="NAME[:ARG=VALUE,...]",
        help="a guidance patch, repeatable, applied in order: " + ", ".join(PATCHES)
        + " (e.g. pag:scale=3, freeu_v2, deep_shrink:downscale_factor=1.5); without one the model's "
        "usual patches (CFGNorm on Qwen-Image-Edit), none with --patch none",
    )  # fmt: skip
    p.add_argument(
        "--lora-schedule", action="append", default=[], metavar="NAME=MULT@START,...",
        help="a LoRA's strength over the steps (repeatable): its strength times MULT from START (0..1 "
        "of the sampling) on, as ComfyUI's hook keyframes (e.g. detail=1@0,0.5@0.4,0@0.8)",
    )  # fmt: skip
    p.add_argument(
        "--region", action="append", default=[], metavar="[negative:]X,Y,W,H[:STRENGTH][@START-END]=PROMPT",
        help="a part of the picture drawn from its own prompt (repeatable; ComfyUI's ConditioningSetArea, "
        "SetTimestepRange and Combine): the box in pixels, or in fractions with a decimal point; "
        "negative: combines it with the negative prompt",
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
    add_reference_arguments(p)
    p.add_argument("--refiner", metavar="FILE", help="the SDXL refiner checkpoint to finish the picture")
    p.add_argument(
        "--refiner-switch", type=number_type(REFINER_SWITCH), default=0.8,
        help="fraction of the steps before the refiner",
    )  # fmt: skip


def control_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``ImageSettings``' control fields from ``--controlnet``, ``--control-picture`` and
    ``--preprocessor-model``."""
    return {
        "controlnets": tuple(parse_controlnet(t) for t in args.controlnet),
        "control_picture": parse_control_picture(args.control_picture) if args.control_picture else None,
        "preprocessor_models": tuple(Path(p) for p in args.preprocessor_model),
    }
