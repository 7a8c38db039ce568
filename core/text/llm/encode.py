"""Running a decoder-LLM tower on a prompt, as ComfyUI does (``SDClipModel`` with an LLM inside).

- The prompt is put into the family's template, tokenized (weights read unless the family turns
  them off), the start token (if any) first, no end token, padded to the family's ``min_length``
  (1 for most: no padding; FLUX.2 klein's 512).
- The attention mask is 1 up to the first padding token of a row (ComfyUI's rule: with no end
  token the padding token itself is masked; a prompt that contains the padding token's text is cut
  there, as in ComfyUI).
- With weights, an empty prompt (start, then padding to the same length) runs in the same batch
  and each weighted position becomes ``(z - z_empty) * w + z_empty``, as for CLIP.
- The output is the hidden state at ``layer`` (or the ``stack`` states side by side), float32 on
  the CPU, with the prompt row's mask: a :class:`~core.archs.protocols.TowerOutput`; where the
  family drops its template's first tokens (``drop``: Qwen-Image's), from there on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from core.archs.protocols import TowerOutput
from core.archs.references import NO_PICTURES, PromptPictures
from core.errors import ModelMismatchError
from core.models.llm import LlmTextModel
from core.text.chunking import ChunkSpec, TokenizedPrompt, tokenize_weighted
from core.text.llm.families import LlmTowerSpec
from core.text.llm.tokenizers import LlmTokenizer, tokenizer_for


def chunk_spec(spec: LlmTowerSpec) -> ChunkSpec:
    return ChunkSpec(
        start=spec.start,
        end=None,
        pad=spec.pad,
        max_length=None,
        pad_to_max_length=False,
        min_length=spec.min_length,
    )


def row_mask(ids: list[int], pad: int) -> list[int]:
    """1 up to (not including) the first ``pad`` token, 0 from there (ComfyUI's mask rule)."""
    cut = ids.index(pad) if pad in ids else len(ids)
    return [1] * cut + [0] * (len(ids) - cut)


@dataclass(frozen=True)
class LlmTower:
    """A loaded LLM encoder with its tokenizer and one family's use of it."""

    model: LlmTextModel
    tokenizer: LlmTokenizer
    spec: LlmTowerSpec
    compute_dtype: torch.dtype = torch.float32
    #: where the tower computes (the memory manager's device); None: where its first weight is
    device: torch.device | None = None

    @classmethod
    def from_file(
        cls,
        model: LlmTextModel,
        spec: LlmTowerSpec,
        path: str | os.PathLike[str] | None,
        *,
        compute_dtype: torch.dtype = torch.float32,
        device: torch.device | None = None,
    ) -> LlmTower:
        """The tower with the tokenizer ``spec`` names (Gemma's read from the file at ``path``)."""
        return cls(model, tokenizer_for(spec, path), spec, compute_dtype, device)

    def tokenize(self, prompt: str, pictures: PromptPictures = NO_PICTURES) -> TokenizedPrompt:
        """The prompt in the family's template; ``pictures`` (an edit's reference pictures) need a
        vision part, which this tower does not have: refused in words."""
        if pictures:
            raise ModelMismatchError(
                "this text encoder reads no pictures",
                why=f"the {self.spec.tokenizer} tower encodes text only",
                fix="Leave the reference pictures out, or use an editing model's text encoder",
            )
        text = self.spec.text(prompt)
        return tokenize_weighted(
            text, self.tokenizer.encode, chunk_spec(self.spec), weighted=self.spec.weighted
        )

    def empty(self, length: int) -> list[int]:
        start = [] if self.spec.start is None else [self.spec.start]
        return start + [self.spec.pad] * (length - len(start))

    def run(self, batch: list[list[int]]) -> torch.Tensor:
        """Hidden states (B, L, D) float32 of equally long rows, each masked by :func:`row_mask`."""
        ids = torch.tensor(batch, dtype=torch.long)
        vocab = self.model.config.vocab_size
        if ids.numel() and int(ids.max()) >= vocab:
            raise ModelMismatchError(
                f"The prompt's token {int(ids.max())} is past this text encoder's {vocab}-token vocabulary",
                why=f"the family's tokenizer ({self.spec.tokenizer}) is not this encoder's",
                fix="load the text encoder the model family names (Z-Image: Qwen3 4B; Lumina 2: Gemma 2 2B)",
            )
        mask = torch.tensor([row_mask(r, self.spec.pad) for r in batch], dtype=torch.long)
        taps = self.spec.stack or (self.spec.layer,)
        device = self.device or next(iter(self.model.parameters())).device
        with torch.inference_mode():
            states = self.model(ids.to(device), mask.to(device), taps=taps, dtype=self.compute_dtype)
        return torch.cat(states, dim=-1).float() if len(states) > 1 else states[0].float()

    def encode(self, prompt: str) -> TowerOutput:
        return self.encode_tokens(self.tokenize(prompt))

    def encode_tokens(self, tokens: TokenizedPrompt) -> TowerOutput:
        """The tower's output for a prompt :meth:`tokenize` gave."""
        (ids,) = tokens.ids()  # one window: LLM prompts are never split
        batch = [ids] + ([self.empty(len(ids))] if tokens.has_weights else [])
        hidden = self.run(batch)
        z = hidden[:1]
        if tokens.has_weights:
            w = torch.tensor(tokens.weights()[0], dtype=z.dtype, device=z.device)[None, :, None]
            empty = hidden[1:2]
            z = torch.where(w != 1.0, (z - empty) * w + empty, z)
        mask = torch.tensor([row_mask(ids, self.spec.pad)], dtype=torch.long)
        start = 0 if self.spec.drop is None else self.spec.drop.start(ids)
        return TowerOutput(z[:, start:].cpu(), None, mask[:, start:])
