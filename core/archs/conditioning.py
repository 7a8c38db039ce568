"""What the text side hands a diffusion network, per batch item: the one input record every
:class:`~core.archs.protocols.DiffusionNet` takes (batching rules are in
:mod:`core.sampling.conditioning`).

``mask`` is the text mask a decoder-LLM encoder's tokens come with (1 = a real token, 0 =
padding; ``[B, tokens]``); CLIP and T5 conventions give none (their networks attend to every
token, as ComfyUI's do).

``references`` are reference pictures already in the network's latent space (VAE-encoded, the
latent format's scale and shift applied), each ``[B, C, h, w]``: what ComfyUI's ``ReferenceLatent``
/ ``TextEncodeQwenImageEditPlus`` put in a conditioning's ``reference_latents`` for FLUX.1 Kontext,
FLUX.2 and Qwen-Image-Edit. A network that takes none refuses them in words.

``attention_bias`` are additive attention biases on spans of the prompt's tokens
(:class:`PromptBias`: ComfyUI's StyleModelApply "attn_bias", which it carries as the
conditioning's ``attention_mask``); no network reads them: a model wrapper turns them into an
attention patch (:mod:`core.sampling.prompt_bias`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from core.errors import LoadoutError


def _bad(what: str, why: str, fix: str) -> LoadoutError:
    return LoadoutError(what, why=why, fix=fix, code="bad_argument")


@dataclass(frozen=True)
class PromptBias:
    """``value`` added to the attention logits on the keys of the prompt tokens ``start`` to
    ``start + count`` (of a joint attention over [prompt tokens, picture tokens]), for every query
    except the prompt's own tokens from ``start`` on (the span's, and the tokens appended after it):
    ComfyUI's StyleModelApply with strength type "attn_bias" (``value`` = log(strength), as float16
    holds it)."""

    start: int
    count: int
    value: float


@dataclass(frozen=True)
class Conditioning:
    """Conditioning of a diffusion network for one prompt.

    ``context``: token embeddings ``[B, tokens, width]``; ``pooled``: the pooled vector
    (SDXL's ``y``/adm, SD3's pooled CLIP, Flux's ``vec``) ``[B, dim]``; ``guidance``: Flux-dev's
    distilled guidance per item ``[B]``; ``mask``: which context tokens are real ``[B, tokens]``
    (None: all of them); ``references``: reference pictures' latents (editing); ``image_prompts``:
    each image prompt's tokens ``[B, tokens, width]`` (IP-Adapter's projected picture, one per
    adapter in order: the positive prompt carries the picture's, the negative the empty one's, as
    ComfyUI picks them per batch row by ``cond_or_uncond``), read by that feature's patches;
    ``attention_bias``: additive biases on spans of the context's tokens (:class:`PromptBias`),
    the same for every batch item.
    """

    context: Tensor
    pooled: Tensor | None = None
    guidance: Tensor | None = None
    mask: Tensor | None = None
    references: tuple[Tensor, ...] = ()
    image_prompts: tuple[Tensor, ...] = ()
    attention_bias: tuple[PromptBias, ...] = ()

    def __post_init__(self) -> None:
        if self.context.ndim != 3:
            raise _bad(
                "the text conditioning has the wrong shape",
                f"a [batch, tokens, width] context is needed, got {list(self.context.shape)}",
                "pass the text encoder's token embeddings",
            )
        for name, t in (("pooled", self.pooled), ("guidance", self.guidance), ("mask", self.mask)):
            if t is not None and t.shape[0] != self.context.shape[0]:
                raise _bad(
                    f"the conditioning's {name} batch does not match its context",
                    f"{t.shape[0]} vs {self.context.shape[0]} items",
                    "give every conditioning tensor the same batch size",
                )
        if self.mask is not None and tuple(self.mask.shape) != tuple(self.context.shape[:2]):
            raise _bad(
                "the conditioning's text mask does not match its context",
                f"a {list(self.context.shape[:2])} mask is needed, got {list(self.mask.shape)}",
                "give one mask value per context token",
            )
        for ref in self.references:
            batch = self.context.shape[0]
            if ref.ndim != 4 or ref.shape[0] != batch:
                raise _bad(
                    "a reference picture's latent has the wrong shape",
                    f"a [{batch}, channels, height, width] latent is needed, got {list(ref.shape)}",
                    "encode each reference picture with the model's VAE, one per batch item",
                )
        tokens = self.context.shape[1]
        for span in self.attention_bias:
            if span.start < 0 or span.count < 1 or span.start + span.count > tokens:
                raise _bad(
                    "an attention bias lies outside the prompt's tokens",
                    f"tokens {span.start} to {span.start + span.count} of a {tokens}-token context",
                    "bias tokens the prompt has (those appended to it)",
                )

    @property
    def batch(self) -> int:
        return int(self.context.shape[0])

    def repeat_to(self, batch: int) -> Conditioning:
        """This conditioning for a latent batch of ``batch`` (a batch of 1 is repeated)."""
        if self.batch == batch:
            return self
        if self.batch != 1:
            raise _bad(
                "the conditioning batch does not match the latent batch",
                f"{self.batch} prompts for {batch} latents",
                "give one prompt for the whole batch or one per latent",
            )
        return Conditioning(
            self.context.expand(batch, -1, -1),
            None if self.pooled is None else self.pooled.expand(batch, *self.pooled.shape[1:]),
            None if self.guidance is None else self.guidance.expand(batch),
            None if self.mask is None else self.mask.expand(batch, -1),
            tuple(r.expand(batch, -1, -1, -1) for r in self.references),
            tuple(p.expand(batch, -1, -1) for p in self.image_prompts),
            self.attention_bias,
        )

    def to(self, device: torch.device, dtype: torch.dtype) -> Conditioning:
        """On ``device``; the float tensors in ``dtype`` (the mask keeps its own)."""

        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)

        return Conditioning(
            self.context.to(device=device, dtype=dtype),
            move(self.pooled),
            move(self.guidance),
            None if self.mask is None else self.mask.to(device=device),
            tuple(r.to(device=device, dtype=dtype) for r in self.references),
            tuple(p.to(device=device, dtype=dtype) for p in self.image_prompts),
            self.attention_bias,
        )
