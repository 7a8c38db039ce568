"""Attention biases on spans of the prompt's tokens, as ComfyUI's StyleModelApply applies a style
model with strength type "attn_bias": the picture's tokens are appended unscaled and the attention
logits on their keys get ``log(strength)``.

ComfyUI carries this as the conditioning's ``attention_mask``, a float16 additive mask over
(prompt tokens + picture tokens) built when the node runs: 0 everywhere except ``log(strength)`` in
the appended tokens' key columns, for the rows of the prompt's earlier tokens and of the picture
(the appended tokens' own rows, and those of tokens appended later, stay 0); Flux stretches the
picture part to the latent's token grid and every double and single block adds it to its logits.
Loadout carries the spans on the conditioning (:class:`~core.archs.conditioning.PromptBias`) and
:func:`prompt_bias_wrapper`, a model wrapper, turns a call's spans into an attention patch on the
network's joint attention (:class:`BiasedPrompt`), so the positive prompt alone gets it (a
conditioning with biases batches only with one with the same:
:func:`core.sampling.conditioning.can_concat`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from core.archs.conditioning import PromptBias
from core.models.patches import AttentionCall, NetworkPatches
from core.sampling.patches import Apply, ModelCall


def bias_value(strength: float) -> float:
    """``log(strength)`` as ComfyUI's mask holds it: computed in float32, kept in float16 (then
    cast to the compute dtype by the model, as any conditioning tensor)."""
    return float(torch.log(torch.tensor([strength], dtype=torch.float32)).to(torch.float16))


def bias_mask(
    spans: Sequence[PromptBias], prompt_tokens: int, queries: int, keys: int, like: Tensor
) -> Tensor:
    """The additive mask ``[1, 1, queries, keys]`` (``like``'s dtype and device) of a joint
    attention whose sequence starts with the ``prompt_tokens`` prompt tokens: each span's value on
    its key columns for the queries before it and after the prompt (the picture's tokens, and any
    tokens after them, such as reference pictures')."""
    mask = torch.zeros((queries, keys), dtype=like.dtype, device=like.device)
    for span in spans:
        columns = slice(span.start, span.start + span.count)
        mask[: span.start, columns] = span.value
        mask[prompt_tokens:, columns] = span.value
    return mask[None, None]


def combined(mask: Tensor | None, bias: Tensor) -> Tensor:
    """A call's own mask (boolean: True attends; or additive) with the bias added (ComfyUI turns
    a boolean mask into log(mask): 0 where it attends, -inf where not)."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=bias.dtype, device=bias.device).masked_fill(~mask, float("-inf"))
    return mask.to(bias.dtype) + bias


@dataclass
class BiasedPrompt:
    """The attention patch: each joint attention's logits get the spans' biases (the mask made
    once per network call and shared by its blocks)."""

    spans: tuple[PromptBias, ...]
    prompt_tokens: int
    made: dict[tuple[int, int, torch.dtype, torch.device], Tensor] = field(default_factory=dict)

    def __call__(self, call: AttentionCall) -> AttentionCall:
        if call.kind != "joint":
            return call
        queries, keys = int(call.q.shape[1]), int(call.k.shape[1])
        key = (queries, keys, call.q.dtype, call.q.device)
        if key not in self.made:
            self.made[key] = bias_mask(self.spans, self.prompt_tokens, queries, keys, call.q)
        return replace(call, mask=combined(call.mask, self.made[key]))


def prompt_bias_wrapper(call: ModelCall, apply: Apply) -> Tensor:
    """A model wrapper: a call whose conditioning has attention biases runs with their patch."""
    spans = call.cond.attention_bias
    if not spans:
        return apply(call)
    patch = BiasedPrompt(spans, int(call.cond.context.shape[1]))
    return apply(call.with_patches(NetworkPatches(attention=(patch,))))


__all__ = ["BiasedPrompt", "bias_mask", "bias_value", "combined", "prompt_bias_wrapper"]
