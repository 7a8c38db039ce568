"""``loadout generate``'s image prompts: ``--ip-adapter FILE:PICTURE[:WEIGHT[@START-END]]`` (SD1.5,
SDXL; ``type=NAME``, ``mask=FILE``, ``composition=PICTURE``, ``composition-weight=X``, ``boost=X``
and ``layers=I:W, ...`` anywhere after the two paths: the weight type, the attention mask, the
style and composition types' second picture and weight, the precise types' boost and the "Mad
Scientist" layer weights), ``--redux FILE:PICTURE[:STRENGTH[:TYPE]]`` (FLUX.1), both repeatable, and
``--image-encoder FILE`` (the vision tower file they read pictures with; without it the one each
needs is found in the library, a ComfyUI install's ``models/clip_vision`` or beside the adapter or
style model) and ``--insightface DIR`` (FaceID's face models; ``face-weight=X``: FaceID Plus v2's)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from app.commands.args import _split_paths
from core.errors import LoadoutError
from core.generate.ip_weights import WEIGHT_TYPES, parse_layer_weights
from core.generate.workflow_request import IpAdapterUse, ReduxUse
from core.values import (
    IP_ADAPTER_BOOST,
    IP_ADAPTER_FACE_WEIGHT,
    IP_ADAPTER_PERCENT,
    IP_ADAPTER_WEIGHT,
    REDUX_STRENGTH,
)

#: the NAME=VALUE options of ``--ip-adapter`` after its two paths
_OPTIONS = (
    "type", "mask", "composition", "composition-weight", "boost", "scaling", "image", "combine", "negative",
    "face-weight",
)  # fmt: skip
#: the options that may be given more than once (each ``image=`` one more picture)
_REPEATABLE = ("image",)
#: ``layers=`` takes colons and commas ("3:2.5, 6:1"): it runs to the next option or the end
_LAYERS = re.compile(r":layers=(.*?)(?=:(?:" + "|".join(_OPTIONS) + r")=|$)")


def add_image_prompt_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ip-adapter", action="append", default=[],
        metavar="FILE:PICTURE[:WEIGHT[@START-END]][:type=NAME][:mask=FILE][:...]",
        help="an image prompt (repeatable; SD1.5/SDXL IP-Adapter, as ComfyUI_IPAdapter_plus's "
        "IPAdapterAdvanced): the adapter file, the picture, its weight (default 1) and the part of the "
        "steps it acts on (e.g. ip-adapter_sd15.safetensors:cat.png:0.8@0-0.6); after the two paths "
        f"type=NAME picks the weight type ({', '.join(WEIGHT_TYPES)}), mask=FILE an attention mask "
        "(white: where the image prompt acts), composition=PICTURE and composition-weight=X the style "
        "and composition types' composition picture (SDXL) and weight (default 1), boost=X the precise "
        "types' style/composition boost, and layers=I:W, ... the per-transformer weights of the node "
        "pack's Mad Scientist node (e.g. layers=3:2.5, 6:1; they replace the weight type unless it is a "
        "precise one); scaling=NAME the embeds scaling (V only, K+V, K+V w/ C penalty, "
        "K+mean(V) w/ C penalty), image=PICTURE one more picture for the same adapter (repeatable), "
        "combine=NAME how its pictures are combined (concat, add, subtract, average, norm average; "
        "default concat) and negative=PICTURE the picture the negative prompt reads; a FaceID adapter "
        "(ip-adapter-faceid*) reads the picture's face with InsightFace's files (--insightface), and "
        "face-weight=X is FaceID Plus v2's face weight (default twice the weight)",
    )  # fmt: skip
    p.add_argument(
        "--redux", action="append", default=[], metavar="FILE:PICTURE[:STRENGTH[:TYPE]]",
        help="an image prompt by FLUX Redux (repeatable, appended in order; ComfyUI's StyleModelApply): "
        "the style model file, its picture, its strength (default 1) and how the strength acts: "
        "multiply (the default: the picture's tokens scaled) or attn_bias (the attention on the "
        "picture's tokens reweighted by log(strength); a strength above 0), e.g. "
        "flux1-redux-dev.safetensors:photo.png:0.5:attn_bias",
    )  # fmt: skip
    p.add_argument(
        "--image-encoder", metavar="FILE",
        help="the image encoder the image prompts read pictures with (a CLIP vision file for IP-Adapter, "
        "sigclip_vision_patch14_384.safetensors for FLUX Redux; default: the one of the right kind in the "
        "library, ComfyUI's models/clip_vision or beside the adapter or style model)",
    )  # fmt: skip


    p.add_argument(
        "--insightface", metavar="DIR",
        help="the folder of InsightFace's buffalo_l face models (det_10g.onnx, w600k_r50.onnx) FaceID "
        "IP-Adapters read faces with (default: ComfyUI's models/insightface/models/buffalo_l, of an install "
        "the library knows or beside the adapter's models/ipadapter)",
    )  # fmt: skip


def image_prompt_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``ImageSettings``' image-prompt fields from ``--ip-adapter``, ``--redux`` and ``--image-encoder``."""
    return {
        "ip_adapters": tuple(parse_ip_adapter(t) for t in args.ip_adapter),
        "redux": tuple(parse_redux(t) for t in args.redux),
        "image_encoder": Path(args.image_encoder) if args.image_encoder else None,
        "insightface": Path(args.insightface) if args.insightface else None,
    }


def _bad(text: str, why: str) -> LoadoutError:
    return LoadoutError(
        f"--ip-adapter {text!r} is not FILE:PICTURE[:WEIGHT[@START-END]]",
        why=why,
        fix="Give e.g. --ip-adapter ip-adapter_sd15.safetensors:cat.png:0.8@0-0.6 or "
        "--ip-adapter 'ip-adapter_sdxl.safetensors:cat.png:type=style transfer:mask=left.png'",
        code="bad_argument",
    )


def _options(text: str, parts: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """The ``name=value`` pieces after the two paths taken out (a file's drive letter joined back:
    ``mask=C`` then ``\\m.png``), and the ``image=`` values in order."""
    kept, options, images = parts[:2], {}, []
    rest = parts[2:]
    while rest:
        piece = rest.pop(0)
        name, eq, value = piece.partition("=")
        if not eq or name not in _OPTIONS:
            kept.append(piece)
            continue
        if len(value) == 1 and value.isalpha() and rest and rest[0].startswith(("\\", "/")):
            value = f"{value}:{rest.pop(0)}"
        if name in _REPEATABLE and value:
            images.append(value)
            continue
        if name in options or not value:
            raise _bad(text, f"the {name}= option is given twice or empty")
        options[name] = value
    return kept, options, images


def parse_ip_adapter(text: str) -> IpAdapterUse:
    """``FILE:PICTURE[:WEIGHT[@START-END]]`` with the ``name=value`` options anywhere after the two
    paths; Windows drive letters stay part of the paths."""
    layers = _LAYERS.findall(text)
    if len(layers) > 1:
        raise _bad(text, "the layers= option is given twice")
    parts, options, images = _options(text, _split_paths(_LAYERS.sub("", text)))
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
    mask = Path(options["mask"]) if "mask" in options else None
    composition = Path(options["composition"]) if "composition" in options else None
    comp_weight = options.get("composition-weight")
    boost = options.get("boost")
    face = options.get("face-weight")
    return IpAdapterUse(
        Path(parts[0]), Path(parts[1]), weight, start, end, options.get("type", "linear"), mask, composition,
        None if comp_weight is None else IP_ADAPTER_WEIGHT.parse(comp_weight),
        None if boost is None else IP_ADAPTER_BOOST.parse(boost),
        parse_layer_weights(layers[0]) if layers else (), options.get("scaling", "V only"),
        tuple(Path(p) for p in images), options.get("combine", "concat"),
        Path(options["negative"]) if "negative" in options else None,
        None if face is None else IP_ADAPTER_FACE_WEIGHT.parse(face),
    )  # fmt: skip


def parse_redux(text: str) -> ReduxUse:
    """``FILE:PICTURE[:STRENGTH[:TYPE]]`` (``--redux``): a FLUX Redux style model, its picture, its
    strength (ComfyUI's StyleModelApply, default 1) and strength type (multiply)."""
    parts = _split_paths(text)
    if len(parts) not in (2, 3, 4):
        raise LoadoutError(
            f"--redux {text!r} is not FILE:PICTURE[:STRENGTH[:TYPE]]",
            why=f"it has {len(parts)} parts",
            fix="Give e.g. --redux flux1-redux-dev.safetensors:photo.png:0.8 or "
            "--redux flux1-redux-dev.safetensors:photo.png:0.5:attn_bias",
            code="bad_argument",
        )
    strength = REDUX_STRENGTH.parse(parts[2]) if len(parts) > 2 else 1.0
    return ReduxUse(Path(parts[0]), Path(parts[1]), strength, *parts[3:])
