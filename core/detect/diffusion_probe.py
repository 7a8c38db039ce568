"""Small helpers the diffusion rules share: O(1) probes, storage variants, the ControlNet guard.

Every rule reads a view by looking keys up, never by scanning it: block counts probe
``<prefix><i>.<suffix>`` for i = 0, 1, ... until one is missing, so a rule costs a few dozen dict
lookups whatever the size of the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from core.detect.keyview import KeyView
from core.detect.registry import Match

MAX_BLOCKS = 4096  # no real network has more numbered blocks under one prefix

FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2", "F8_E4M3FN", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})
# per-layer keys ComfyUI writes beside a quantized weight (scaled fp8 and its newer mixed formats)
SCALE_SUFFIXES = ("scale_weight", "weight_scale", "input_scale", "comfy_quant")

#: keys only a ControlNet (or a ControlNet-like adapter) has; a diffusion rule must refuse these views
CONTROLNET_MARKERS = (
    "input_hint_block.0.weight",
    "zero_convs.0.0.weight",
    "middle_block_out.0.weight",
    "control_model.input_blocks.0.0.weight",
    "control_model.zero_convs.0.0.weight",
    "controlnet_cond_embedding.conv_in.weight",
    "controlnet_down_blocks.0.weight",
    "controlnet_mid_block.weight",
    "controlnet_blocks.0.weight",
    "controlnet_single_blocks.0.weight",
    "controlnet_x_embedder.weight",
    "pos_embed_input.weight",
    "pos_embed_input.proj.weight",
)


def is_controlnet(view: KeyView) -> bool:
    return view.has_any(CONTROLNET_MARKERS)


def count_numbered(view: KeyView, prefix: str, suffixes: Iterable[str]) -> int:
    """How many consecutive blocks ``<prefix>0.<s>``, ``<prefix>1.<s>``, ... exist (any suffix counts)."""
    sfx = tuple(suffixes)
    n = 0
    while n < MAX_BLOCKS and any(f"{prefix}{n}.{s}" in view for s in sfx):
        n += 1
    return n


def numbered_where(view: KeyView, prefix: str, suffix: str, limit: int) -> list[int]:
    """The block numbers below ``limit`` for which ``<prefix><i>.<suffix>`` exists."""
    return [i for i in range(limit) if f"{prefix}{i}.{suffix}" in view]


def first_key(view: KeyView, keys: Iterable[str]) -> str | None:
    return next((k for k in keys if k in view), None)


def ndim(view: KeyView, key: str) -> int | None:
    s = view.shape(key)
    return None if s is None else len(s)


def _spread(probes: Iterable[str]) -> Iterator[str]:
    """Each probe, then the same key in blocks 1 and 8: mixed-precision files keep the first block wide."""
    for key in probes:
        yield key
        if ".0." in key:
            yield key.replace(".0.", ".1.", 1)
            yield key.replace(".0.", ".8.", 1)


def storage(view: KeyView, probes: Iterable[str]) -> tuple[str | None, str | None]:
    """(storage variant, weight dtype) from a few probe weights (O(1) lookups, whatever the file size).

    The variant is "fp8-scaled" for ComfyUI's scaled fp8 (a ``scaled_fp8`` marker, or per-layer
    scales beside an fp8 weight), "fp8" for plain fp8 weights, "quantized" for per-layer scales
    beside another dtype (int8, packed 4-bit), else None. The dtype is the first fp8 probe's when
    there is one, else the first probe's.
    """
    found = [k for k in _spread(probes) if k in view]
    dtypes = [view[k].dtype for k in found]
    scaled = any(
        view.has_any(k[: -len("weight")] + s for s in SCALE_SUFFIXES) for k in found if k.endswith("weight")
    )
    fp8 = [d for d in dtypes if d in FP8_DTYPES]
    dtype = fp8[0] if fp8 else dtypes[0] if dtypes else None
    if "scaled_fp8" in view or (scaled and fp8):
        return "fp8-scaled", dtype
    if fp8:
        return "fp8", dtype
    if scaled:
        return "quantized", dtype
    return None, dtype


def finish(
    view: KeyView,
    family: str,
    *,
    layout: str,
    probes: Iterable[str],
    fields: dict[str, Any],
    variant: str | None = None,
    warnings: Iterable[str] = (),
    score: float = 1.0,
) -> Match:
    """The Match for ``family``, with the storage variant and weight dtype added to the fields.

    ``Match.variant`` is the model variant ("inpaint", "depth", ...) when there is one, else the
    storage variant; ``fields["variants"]`` lists both.
    """
    stored, dtype = storage(view, probes)
    variants = [v for v in (variant, stored) if v]
    out = dict(fields)
    out["storage"] = stored
    out["weight_dtype"] = dtype
    out["variants"] = variants
    return Match(
        family,
        layout=layout,
        variant=variants[0] if variants else None,
        fields=out,
        warnings=tuple(warnings),
        score=score,
    )


def alternative(primary: Match, family: str, score: float = 0.5) -> Match:
    """The same reading attributed to ``family``: for shapes that cannot tell two families apart."""
    fields = dict(primary.fields)
    fields["ambiguous_with"] = [primary.family]
    return Match(family, primary.layout, primary.variant, fields, primary.warnings, score)
