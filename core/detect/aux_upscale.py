"""Shape rules for image upscale models: ESRGAN/RRDB (three key layouts), Real-ESRGAN's compact
SRVGG network, and the Swin-transformer family (SwinIR, Swin2SR, HAT).

The scale factor is read from the shapes: the number of 2x up-convolutions, the channel count of
pixel-shuffle convolutions (``c * r * r``), and the pixel-unshuffled input (x2/x1 Real-ESRGAN feed
``3 * 4`` or ``3 * 16`` channels into a x4 network).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from core.detect.keyview import KeyView
from core.detect.registry import Match


def _shuffle_factor(ratio: int) -> int | None:
    """``r`` where ``ratio == r * r`` (pixel shuffle/unshuffle), else None."""
    if ratio <= 0:
        return None
    r = math.isqrt(ratio)
    return r if r * r == ratio else None


def _conv4(view: KeyView, key: str) -> tuple[int, ...] | None:
    s = view.shape(key)
    return s if s is not None and len(s) == 4 else None


# ESRGAN / RRDB ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RrdbLayout:
    name: str
    first: str
    trunk: str  # prefix of the numbered RRDB blocks
    dense: str  # first dense conv under block 0
    up: str  # up-convolution name with {n} for 1, 2, ...
    last: str


_RRDB_NEW = (
    RrdbLayout("basicsr", "conv_first", "body.", "rdb1.conv1.weight", "conv_up{n}", "conv_last"),
    RrdbLayout("basicsr-legacy", "conv_first", "RRDB_trunk.", "RDB1.conv1.weight", "upconv{n}", "conv_last"),
)
_OLD_SEQ = re.compile(r"^model\.(\d+)\.weight$")


def _rrdb_fields(
    nf: int, in_ch: int, out_ch: int, blocks: int, up_factors: list[int]
) -> tuple[dict[str, object], tuple[str, ...]]:
    scale = math.prod(up_factors)
    unshuffle = _shuffle_factor(in_ch // out_ch) if out_ch and in_ch % out_ch == 0 else None
    warnings: tuple[str, ...] = ()
    if unshuffle is None:
        unshuffle = 1
        warnings = (f"{in_ch} input and {out_ch} output channels: the scale factor is a guess",)
    elif unshuffle > 1:
        scale = max(1, scale // unshuffle)
    fields: dict[str, object] = {
        "scale": scale,
        "in_channels": in_ch // (unshuffle * unshuffle),
        "out_channels": out_ch,
        "num_filters": nf,
        "num_blocks": blocks,
        "pixel_unshuffle": unshuffle,
    }
    return fields, warnings


def match_esrgan(view: KeyView) -> Match | None:
    """ESRGAN's RRDB network in the original (``model.N``) or BasicSR layouts."""
    first = _conv4(view, "model.0.weight")
    if first is not None and "model.1.sub.0.RDB1.conv1.0.weight" in view:
        seq = sorted(int(m.group(1)) for k in view if (m := _OLD_SEQ.match(k)) and _conv4(view, k))
        if len(seq) < 3:
            return None
        tail = [s for s in seq if s >= 2]
        nf = first[0]
        last = _conv4(view, f"model.{tail[-1]}.weight")
        if last is None or len(tail) < 2:
            return None
        factors = []
        for idx in tail[:-2]:  # the up-convolutions sit between the trunk and the HR/last convs
            c_out = view.dim(f"model.{idx}.weight", 0) or nf
            factors.append(2 if c_out == nf else (_shuffle_factor(c_out // nf) or 2))
        fields, warnings = _rrdb_fields(nf, first[1], last[0], view.count_blocks("model.1.sub.") - 1, factors)
        return Match("esrgan", layout="original", fields=fields, warnings=warnings)
    for lay in _RRDB_NEW:
        first = _conv4(view, f"{lay.first}.weight")
        last = _conv4(view, f"{lay.last}.weight")
        if first is None or last is None or f"{lay.trunk}0.{lay.dense}" not in view:
            continue
        n_up = 0
        while f"{lay.up.format(n=n_up + 1)}.weight" in view:
            n_up += 1
        fields, warnings = _rrdb_fields(first[0], first[1], last[0], view.count_blocks(lay.trunk), [2] * n_up)
        return Match("esrgan", layout=lay.name, fields=fields, warnings=warnings)
    return None


# Real-ESRGAN compact (SRVGGNetCompact) ----------------------------------------------------------

_BODY = re.compile(r"^body\.(\d+)\.(weight|bias)$")


def match_srvgg(view: KeyView) -> Match | None:
    """``body.N`` convolutions alternating with (PReLU) activations, nothing else in the file."""
    first = _conv4(view, "body.0.weight")
    if first is None or len(view) < 6:
        return None
    convs: list[int] = []
    for k in view:
        m = _BODY.match(k)
        if m is None:
            return None  # any other key: not a plain SRVGG network
        if m.group(2) == "weight" and _conv4(view, k):
            convs.append(int(m.group(1)))
    convs.sort()
    if len(convs) < 3 or convs != list(range(0, 2 * len(convs), 2)):
        return None
    nf, in_ch = first[0], first[1]
    last_out = view.dim(f"body.{convs[-1]}.weight", 0) or 0
    scale = _shuffle_factor(last_out // in_ch) if last_out % in_ch == 0 else None
    if scale is None:
        return None
    act = "prelu" if view.dim("body.1.weight", 0) == nf else "other"
    return Match(
        "realesrgan-compact",
        layout="original",
        fields={
            "scale": scale,
            "in_channels": in_ch,
            "out_channels": in_ch,
            "num_filters": nf,
            "num_conv": len(convs) - 2,
            "activation": act,
        },
    )


# SwinIR / Swin2SR / HAT ------------------------------------------------------------------------

_SWIN_BLOCK = "layers.0.residual_group.blocks.0."


def _swin_family(view: KeyView) -> str:
    if "relative_position_index_SA" in view or "layers.0.residual_group.overlap_attn.qkv.weight" in view:
        return "hat"
    if _SWIN_BLOCK + "attn.logit_scale" in view:
        return "swin2sr"
    return "swinir"


def _swin_upsampler(view: KeyView, in_ch: int) -> tuple[str, int, int]:
    """(upsampler, scale, out channels)."""
    last = view.dim("conv_last.weight", 0)
    if "conv_up1.weight" in view:
        n = 1
        while f"conv_up{n + 1}.weight" in view:
            n += 1
        return "nearest+conv", 2**n, last or in_ch
    if "conv_before_upsample.0.weight" in view:
        feat = view.dim("conv_before_upsample.0.weight", 0) or 64
        scale, i = 1, 0
        while (c := view.dim(f"upsample.{i}.weight", 0)) is not None:
            scale *= _shuffle_factor(c // feat) or 1
            i += 2
        return "pixelshuffle", scale, last or in_ch
    direct = view.dim("upsample.0.weight", 0)
    if direct is not None:
        return "pixelshuffledirect", _shuffle_factor(direct // in_ch) or 1, in_ch
    return "none", 1, last or in_ch


def match_swin(view: KeyView) -> Match | None:
    first = _conv4(view, "conv_first.weight")
    table = view.shape(_SWIN_BLOCK + "attn.relative_position_bias_table")
    has_cpb = _SWIN_BLOCK + "attn.cpb_mlp.0.weight" in view
    if first is None or _SWIN_BLOCK + "attn.qkv.weight" not in view or (table is None and not has_cpb):
        return None
    family = _swin_family(view)
    embed_dim, in_ch = first[0], first[1]
    n_layers = view.count_blocks("layers.")
    depths = [view.count_blocks(f"layers.{i}.residual_group.blocks.") for i in range(n_layers)]
    heads = [
        view.dim(f"layers.{i}.residual_group.blocks.0.attn.relative_position_bias_table", 1)
        for i in range(n_layers)
    ]
    window = None
    if table is not None and len(table) == 2:
        side = math.isqrt(table[0])
        window = (side + 1) // 2 if side * side == table[0] else None
    upsampler, scale, out_ch = _swin_upsampler(view, in_ch)
    return Match(
        family,
        layout="original",
        fields={
            "scale": scale,
            "in_channels": in_ch,
            "out_channels": out_ch,
            "embed_dim": embed_dim,
            "depths": depths,
            "num_heads": heads,
            "window_size": window,
            "upsampler": upsampler,
        },
    )
