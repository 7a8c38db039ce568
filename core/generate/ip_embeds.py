"""IP-Adapter's embeds scalings and picture combinations, as ComfyUI_IPAdapter_plus computes them
(``CrossAttentionPatch.ipadapter_attention``'s ``embeds_scaling``; ``ipadapter_execute``'s
``combine_embeds``).

**Embeds scalings** say where the weight ``w`` acts in the adapter's extra attention of queries
``q`` over the image tokens' keys ``k`` and values ``v`` (``C``: the keys' width, the attention's
heads times head width, per layer):

* ``V only`` (the default): ``w * attn(q, k, v)``;
* ``K+V``: ``attn(q, w k, w v)``;
* ``K+V w/ C penalty``: the same with ``w' = w * C / 1280``;
* ``K+mean(V) w/ C penalty``: ``attn(q, w' k, v - m + w' m)``, ``m`` the mean of ``v`` over each
  picture's tokens (one picture's, also when several pictures are concatenated: the pack takes
  the mean before its attention lays the pictures' tokens side by side).

An attention mask multiplies the output in every case. A weight of 0 leaves the attention out.

**Combinations** of several pictures for one adapter act on the vision tower's output (``image
embeds`` or penultimate hidden states, one row per picture) before the adapter's projection:
``concat`` keeps every picture (their tokens side by side: more tokens), ``add`` sums them,
``subtract`` takes the first minus the mean of the others, ``average`` the mean, ``norm average``
the mean of the rows each divided by the norm over the pictures (the pack's ``torch.norm(dim=0)``:
per element, across the pictures). The negative side keeps one picture's worth (the first row) for
every mode but ``concat``, which repeats it per picture.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: ComfyUI_IPAdapter_plus's ``embeds_scaling`` choices, in its order
EMBEDS_SCALINGS = ("V only", "K+V", "K+V w/ C penalty", "K+mean(V) w/ C penalty")
#: ComfyUI_IPAdapter_plus's ``combine_embeds`` choices, in its order
COMBINE_MODES = ("concat", "add", "subtract", "average", "norm average")
#: the pack's C penalty divides the keys' width by this
PENALTY_WIDTH = 1280.0


def combine(embeds: Tensor, mode: str) -> Tensor:
    """The (N, ...) rows of ``N`` pictures' tower outputs as ``mode`` combines them: ``concat``
    keeps the N rows, the others give one."""
    if mode == "concat" or embeds.shape[0] == 1:
        return embeds
    if mode == "add":
        return embeds.sum(0, keepdim=True)
    if mode == "subtract":
        return (embeds[0] - embeds[1:].mean(0))[None]
    if mode == "average":
        return embeds.mean(0, keepdim=True)
    if mode == "norm average":
        normed: Tensor = embeds / torch.norm(embeds, dim=0, keepdim=True)
        return normed.mean(0, keepdim=True)
    raise ValueError(mode)


def concat_pictures(tokens: Tensor) -> Tensor:
    """(N, T, C) projected tokens of ``N`` pictures as one row of ``N * T`` tokens (``concat``)."""
    return tokens.reshape(1, -1, tokens.shape[-1])


def scaled_kv(
    k: Tensor, v: Tensor, weight: float, scaling: str, per_picture: int
) -> tuple[Tensor, Tensor, float]:
    """The keys and values the extra attention reads and the factor its output is multiplied by,
    for ``scaling`` at ``weight``; ``per_picture``: how many of the tokens are one picture's (the
    mean of ``K+mean(V)`` is taken over each picture's)."""
    if scaling == "V only":
        return k, v, weight
    w = weight * k.shape[-1] / PENALTY_WIDTH if "penalty" in scaling else weight
    if scaling == "K+mean(V) w/ C penalty":
        b, n, c = v.shape
        grouped = v.reshape(b, n // per_picture, per_picture, c)
        mean = grouped.mean(2, keepdim=True)
        return k * w, ((grouped - mean) + mean * w).reshape(b, n, c), 1.0
    if scaling in ("K+V", "K+V w/ C penalty"):
        return k * w, v * w, 1.0
    raise ValueError(scaling)


__all__ = ["COMBINE_MODES", "EMBEDS_SCALINGS", "combine", "concat_pictures", "scaled_kv"]
