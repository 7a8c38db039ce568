"""What the text side hands the diffusion model, per batch item, and how ComfyUI batches a
positive and a negative prompt into one forward pass.

A :class:`Conditioning` has batch first in every tensor; a batch of 1 is repeated to the latent's
batch. Two conditionings concatenate when their token widths match and their token counts are
within a factor 4 of their least common multiple (a 77-token negative with a 154-token prompt):
each context is repeated along tokens up to that multiple, as ComfyUI does. Otherwise the caller
runs them as two forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from core.errors import LoadoutError

#: ComfyUI's limit on repeating a context to a common token count.
MAX_CONTEXT_REPEAT = 4


@dataclass(frozen=True)
class Conditioning:
    """Conditioning of a diffusion network for one prompt.

    ``context``: token embeddings ``[B, tokens, width]``; ``pooled``: the pooled vector
    (SDXL's ``y``/adm, SD3's pooled CLIP, Flux's ``vec``) ``[B, dim]``; ``guidance``: Flux-dev's
    distilled guidance per item ``[B]``.
    """

    context: Tensor
    pooled: Tensor | None = None
    guidance: Tensor | None = None

    def __post_init__(self) -> None:
        if self.context.ndim != 3:
            raise LoadoutError(
                "the text conditioning has the wrong shape",
                why=f"a [batch, tokens, width] context is needed, got {list(self.context.shape)}",
                fix="pass the text encoder's token embeddings",
                code="bad_argument",
            )
        for name, t in (("pooled", self.pooled), ("guidance", self.guidance)):
            if t is not None and t.shape[0] != self.context.shape[0]:
                raise LoadoutError(
                    f"the conditioning's {name} batch does not match its context",
                    why=f"{t.shape[0]} vs {self.context.shape[0]} items",
                    fix="give every conditioning tensor the same batch size",
                    code="bad_argument",
                )

    @property
    def batch(self) -> int:
        return int(self.context.shape[0])

    def repeat_to(self, batch: int) -> Conditioning:
        """This conditioning for a latent batch of ``batch`` (a batch of 1 is repeated)."""
        if self.batch == batch:
            return self
        if self.batch != 1:
            raise LoadoutError(
                "the conditioning batch does not match the latent batch",
                why=f"{self.batch} prompts for {batch} latents",
                fix="give one prompt for the whole batch or one per latent",
                code="bad_argument",
            )
        return Conditioning(
            self.context.expand(batch, -1, -1),
            None if self.pooled is None else self.pooled.expand(batch, *self.pooled.shape[1:]),
            None if self.guidance is None else self.guidance.expand(batch),
        )

    def to(self, device: torch.device, dtype: torch.dtype) -> Conditioning:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)

        return Conditioning(
            self.context.to(device=device, dtype=dtype), move(self.pooled), move(self.guidance)
        )


def can_concat(a: Conditioning, b: Conditioning) -> bool:
    if a.context.device != b.context.device or a.context.shape[2] != b.context.shape[2]:
        return False
    if (a.pooled is None) != (b.pooled is None) or (a.guidance is None) != (b.guidance is None):
        return False
    if a.pooled is not None and b.pooled is not None and a.pooled.shape[1:] != b.pooled.shape[1:]:
        return False
    la, lb = a.context.shape[1], b.context.shape[1]
    return math.lcm(la, lb) // min(la, lb) <= MAX_CONTEXT_REPEAT


def concat(conds: Sequence[Conditioning]) -> Conditioning:
    """One conditioning of all items, contexts repeated to a common token count."""
    tokens = math.lcm(*(c.context.shape[1] for c in conds))
    contexts = [c.context.repeat(1, tokens // c.context.shape[1], 1) for c in conds]
    pooled = [c.pooled for c in conds if c.pooled is not None]
    guidance = [c.guidance for c in conds if c.guidance is not None]
    return Conditioning(
        torch.cat(contexts),
        torch.cat(pooled) if pooled else None,
        torch.cat(guidance) if guidance else None,
    )
