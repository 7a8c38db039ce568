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
- Pictures (Qwen-Image-Edit's): see :mod:`core.text.llm.pictures`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from core.archs.protocols import TowerOutput
from core.archs.references import NO_PICTURES, PromptPictures
from core.errors import LoadoutError, ModelMismatchError
from core.models.llm import LlmTextModel
from core.models.llm.vision import QwenVisionTower
from core.text.chunking import ChunkSpec, TokenizedPrompt, tokenize_weighted
from core.text.llm.families import LlmTowerSpec
from core.text.llm.pictures import PictureSpan, expand, picture_tokens
from core.text.llm.pictures import positions as picture_positions
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

    def tokenize(self, prompt: str, pictures: PromptPictures | int = NO_PICTURES) -> TokenizedPrompt:
        """The prompt in the family's template, after one picture prefix per picture (the family's
        :class:`~core.archs.llm.towers.PictureSpec`) where ``pictures`` (an edit's reference
        pictures, or their number) are given; a tower whose family takes none refuses them."""
        count = pictures if isinstance(pictures, int) else len(pictures.images)
        spec = self.spec
        if count:
            prompt = self._picture_spec(count).text(count) + prompt
        elif spec.pictures is not None and spec.pictures.bare_template is not None:
            spec = replace(spec, template=spec.pictures.bare_template)
        text = spec.text(prompt)
        return tokenize_weighted(
            text, self.tokenizer.encode, chunk_spec(self.spec), weighted=self.spec.weighted
        )

    def empty(self, length: int) -> list[int]:
        start = [] if self.spec.start is None else [self.spec.start]
        return start + [self.spec.pad] * (length - len(start))

    def _picture_spec(self, count: int) -> Any:
        spec = self.spec.pictures
        if spec is None or count > spec.most:
            raise LoadoutError(
                f"this prompt encoding takes {0 if spec is None else spec.most} reference pictures, "
                f"{count} were given",
                why="only an edit model's prompt reads pictures, up to the number it was made for",
                fix="leave the reference pictures out, or give fewer",
                code="bad_argument",
            )
        return spec

    def _visual(self) -> QwenVisionTower:
        visual = getattr(self.model, "visual", None)
        if not isinstance(visual, QwenVisionTower):
            raise ModelMismatchError(
                "the text encoder has no vision tower to read the reference pictures",
                why="its file carries only the language model (no visual.* weights)",
                fix="load the full Qwen2.5-VL file (Comfy-Org's qwen_2.5_vl_7b*.safetensors has both)",
            )
        return visual

    def run(
        self,
        batch: list[list[int]],
        inserts: Sequence[tuple[int, torch.Tensor]] = (),
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states (B, L, D) float32 of equally long rows, each masked by :func:`row_mask`;
        ``inserts`` and ``positions`` as :meth:`LlmTextModel.forward` takes them."""
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
            states = self.model(
                ids.to(device), mask.to(device), taps=taps, dtype=self.compute_dtype, inserts=inserts,
                positions=positions,
            )  # fmt: skip
        return torch.cat(states, dim=-1).float() if len(states) > 1 else states[0].float()

    def encode(self, prompt: str, pictures: Sequence[torch.Tensor] = ()) -> TowerOutput:
        """``pictures``: RGB [3, H, W] in 0..1, read by the encoder's vision tower (the family's
        :class:`~core.archs.llm.towers.PictureSpec` says how)."""
        return self.encode_tokens(self.tokenize(prompt, len(pictures)), pictures)

    def encode_tokens(self, tokens: TokenizedPrompt, pictures: Sequence[torch.Tensor] = ()) -> TowerOutput:
        """The tower's output for a prompt :meth:`tokenize` gave (with as many ``pictures``)."""
        (ids,) = tokens.ids()  # one window: LLM prompts are never split
        inserts: list[tuple[int, torch.Tensor]] = []
        places = None
        if pictures:
            spec = self._picture_spec(len(pictures))
            read = picture_tokens(self._visual(), pictures, spec.area, self.compute_dtype, self.device)
            ids, starts = expand(ids, spec.token, [r * c for _, r, c in read])
            inserts = [(s, t) for s, (t, _, _) in zip(starts, read, strict=True)]
            spans = [PictureSpan(s, r, c) for s, (_, r, c) in zip(starts, read, strict=True)]
            places = picture_positions(len(ids), spans)
        batch = [ids] + ([self.empty(len(ids))] if tokens.has_weights else [])
        hidden = self.run(batch, inserts, places)
        z = hidden[:1]
        if tokens.has_weights:
            w = torch.tensor(tokens.weights()[0], dtype=z.dtype, device=z.device)[None, :, None]
            empty = hidden[1:2]
            z = torch.where(w != 1.0, (z - empty) * w + empty, z)
        mask = torch.tensor([row_mask(ids, self.spec.pad)], dtype=torch.long)
        start = 0 if self.spec.drop is None else self.spec.drop.start(ids)
        return TowerOutput(z[:, start:].cpu(), None, mask[:, start:])
