"""What the text side hands the diffusion model, per batch item, and how ComfyUI batches a
positive and a negative prompt into one forward pass.

A :class:`Conditioning` has batch first in every tensor; a batch of 1 is repeated to the latent's
batch. Two conditionings concatenate when their token widths match and their token counts are
within a factor 4 of their least common multiple (a 77-token negative with a 154-token prompt):
each context is repeated along tokens up to that multiple, as ComfyUI does. Otherwise the caller
runs them as two forward passes (also when their reference latents differ in count or
shape, and when their attention biases differ: ComfyUI's conds with and without an
``attention_mask`` never batch). The record itself is :class:`core.archs.conditioning.Conditioning`
(every network takes it); a text mask repeats with its context.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from core.archs.conditioning import Conditioning

#: ComfyUI's limit on repeating a context to a common token count.
MAX_CONTEXT_REPEAT = 4


def can_concat(a: Conditioning, b: Conditioning) -> bool:
    if a.context.device != b.context.device or a.context.shape[2] != b.context.shape[2]:
        return False
    if (a.pooled is None) != (b.pooled is None) or (a.guidance is None) != (b.guidance is None):
        return False
    if (a.mask is None) != (b.mask is None):
        return False
    if [r.shape[1:] for r in a.references] != [r.shape[1:] for r in b.references]:
        return False  # reference tokens differ: two forward passes, as ComfyUI's unequal conds
    if [p.shape[1:] for p in a.image_prompts] != [p.shape[1:] for p in b.image_prompts]:
        return False
    if a.pooled is not None and b.pooled is not None and a.pooled.shape[1:] != b.pooled.shape[1:]:
        return False
    la, lb = a.context.shape[1], b.context.shape[1]
    if a.attention_bias != b.attention_bias or (a.attention_bias and la != lb):
        return False  # the biases name token positions: only the same prompt layout batches
    return math.lcm(la, lb) // min(la, lb) <= MAX_CONTEXT_REPEAT


def concat(conds: Sequence[Conditioning]) -> Conditioning:
    """One conditioning of all items, contexts repeated to a common token count."""
    tokens = math.lcm(*(c.context.shape[1] for c in conds))
    contexts = [c.context.repeat(1, tokens // c.context.shape[1], 1) for c in conds]
    pooled = [c.pooled for c in conds if c.pooled is not None]
    guidance = [c.guidance for c in conds if c.guidance is not None]
    masks = [c.mask.repeat(1, tokens // c.mask.shape[1]) for c in conds if c.mask is not None]
    references = tuple(torch.cat(refs) for refs in zip(*(c.references for c in conds), strict=True))
    prompts = tuple(torch.cat(p) for p in zip(*(c.image_prompts for c in conds), strict=True))
    return Conditioning(
        torch.cat(contexts),
        torch.cat(pooled) if pooled else None,
        torch.cat(guidance) if guidance else None,
        torch.cat(masks) if masks else None,
        references,
        prompts,
        conds[0].attention_bias,  # every item's is the same (can_concat)
    )


__all__ = ["MAX_CONTEXT_REPEAT", "Conditioning", "can_concat", "concat"]
