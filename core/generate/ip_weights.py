"""IP-Adapter's weight types and attention mask, as ComfyUI_IPAdapter_plus computes them
(``ipadapter_execute`` and ``CrossAttentionPatch.ipadapter_attention``).

**Weight types** scale the adapter's weight per UNet transformer (``SpatialTransformer``), numbered
``t`` in the order the UNet's forward runs them (ComfyUI's ``transformer_index``: the input blocks,
the middle block, then the output blocks; every transformer block of one ``SpatialTransformer``
shares its number) out of ``n`` = 11 for SDXL, 16 for SD1.5:

* ``linear``: the weight everywhere;
* ``ease in`` ``w * (0.05 + 0.95 * (1 - t/n))``; ``ease out`` ``w * (0.05 + 0.95 * t/n)``;
  ``ease in-out`` ``w * (0.05 + 0.95 * (1 - |t - n/2| / (n/2)))``; ``reverse in-out``
  ``w * (0.05 + 0.95 * |t - n/2| / (n/2))``;
* ``weak input`` / ``weak middle`` / ``weak output``: that stage's blocks at ``0.2 w``; ``strong
  middle``: the input and output blocks at ``0.2 w``;
* ``style transfer``, ``composition``, ``strong style transfer``: only the listed transformers
  (the others get no image prompt): SDXL style ``{6}`` (the second output transformer, InstantStyle's
  ``up_blocks.0.attentions.1``), composition ``{3}`` (``down_blocks.2.attentions.1``), strong style
  all but 3; SD1.5 style ``{0-3, 9-15}``, composition ``{4: 0.25 w, 5: w}``, strong style all but
  4 and 5.

The pack decides SDXL by the adapter's output width (2048) and ``n`` by whether the adapter has a
101st key/value pair (a whole SDXL adapter has 70); Loadout takes both from the adapter's output
width (the adapter package's ``transformers``: the same for every real file).

**The attention mask** (``attn_mask``: (H, W) in [0, 1], any size) multiplies the adapter's
attention output per query token: for a call with ``L`` tokens on a latent of ``oh x ow``, the
mask is resized (bilinear, ``F.interpolate``) to ``mh x mw`` with ``mh = int(oh / sqrt(oh * ow / L))``
(plus one when ``L`` is not a multiple of it) and ``mw = L // mh``, flattened, and zero-padded
(half before, half after) or centre-cropped to ``L`` tokens.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from core.models.patches import Site

#: the weight types Loadout computes, in ComfyUI_IPAdapter_plus's order
WEIGHT_TYPES = (
    "linear", "ease in", "ease out", "ease in-out", "reverse in-out", "weak input", "weak output",
    "weak middle", "strong middle", "style transfer", "composition", "strong style transfer",
)  # fmt: skip

_SD1_STYLE = (0, 1, 2, 3, 9, 10, 11, 12, 13, 14, 15)
_SDXL = 11  # transformers an SDXL UNet numbers


def _chosen(weight_type: str, weight: float, sdxl: bool) -> dict[int, float] | None:
    """The transformers a block-selecting type patches and their weights (None: every one)."""
    if weight_type == "style transfer":
        return {6: weight} if sdxl else dict.fromkeys(_SD1_STYLE, weight)
    if weight_type == "composition":
        return {3: weight} if sdxl else {4: weight * 0.25, 5: weight}
    if weight_type == "strong style transfer":
        left_out = (3,) if sdxl else (4, 5)
        return {t: weight for t in range(11 if sdxl else 16) if t not in left_out}
    return None


def layer_weight(weight_type: str, weight: float, index: int, stage: str, n: int) -> float:
    """The adapter's weight at the UNet transformer ``index`` (forward order) of ``stage``
    (``input``, ``middle``, ``output``) out of ``n`` (11: SDXL's numbering, 16: SD1.5's); 0 where
    the type leaves that transformer out."""
    sdxl = n == _SDXL
    half = n / 2
    if weight_type == "ease in":
        return weight * (0.05 + 0.95 * (1 - index / n))
    if weight_type == "ease out":
        return weight * (0.05 + 0.95 * (index / n))
    if weight_type == "ease in-out":
        return weight * (0.05 + 0.95 * (1 - abs(index - half) / half))
    if weight_type == "reverse in-out":
        return weight * (0.05 + 0.95 * (abs(index - half) / half))
    weak = {"weak input": ("input",), "weak middle": ("middle",), "weak output": ("output",),
            "strong middle": ("input", "output")}  # fmt: skip
    if weight_type in weak:
        return weight * 0.2 if stage in weak[weight_type] else weight
    chosen = _chosen(weight_type, weight, sdxl)
    return weight if chosen is None else chosen.get(index, 0.0)


def token_mask(mask: torch.Tensor, latent: tuple[int, int], tokens: int) -> torch.Tensor:
    """The (H, W) mask as one factor per query token of an attention over ``tokens`` tokens on an
    ``oh x ow`` latent: (tokens,)."""
    oh, ow = latent
    mh = int(oh / math.sqrt(oh * ow / tokens))
    mh += int(tokens % mh != 0)
    mw = tokens // mh
    flat = F.interpolate(mask[None, None].float(), size=(mh, mw), mode="bilinear")[0, 0].reshape(-1)
    if mh * mw < tokens:
        pad = tokens - mh * mw
        return F.pad(flat, (pad // 2, pad - pad // 2))
    start = (mh * mw - tokens) // 2
    return flat[start : start + tokens]


def transformer_numbers(sites: tuple[tuple[Site, int], ...]) -> dict[Site, int]:
    """Each site holding a cross-attention numbered as ComfyUI's ``transformer_index``: the input
    blocks, the middle block, then the output blocks, in order."""
    stages = {"input": 0, "middle": 1, "output": 2}
    unique = dict.fromkeys(site for site, _ in sites)
    ordered = sorted(unique, key=lambda s: (stages.get(s.stage, 3), s.index))
    return {site: i for i, site in enumerate(ordered)}


__all__ = ["WEIGHT_TYPES", "layer_weight", "token_mask", "transformer_numbers"]
