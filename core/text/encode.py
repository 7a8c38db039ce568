"""Running text towers on token windows and applying prompt weights, as ComfyUI does.

ComfyUI facts followed (``ClipTokenWeightEncoder.encode_token_weights``, ``SDClipModel.forward``):

- All windows of a prompt go through the tower as one batch, in float32 (ComfyUI passes
  ``dtype=torch.float32`` to its text models; weights are cast at forward).
- When any token's weight differs from 1.0, an *empty* window (start, end, then padding, as long
  as the prompt's windows) is encoded in the same batch, and each weighted position becomes
  ``(z - z_empty) * w + z_empty`` with ``z_empty`` the empty window's hidden state at the same
  position. Positions of weight 1.0 are left as they are.
- Windows are joined along the token axis; the pooled vector is the first window's.
- CLIP layer choice: ``layer=None`` takes the last layer after the final layer norm; a negative
  ``layer`` (ComfyUI's ``CLIPSetLastLayer``: -1 last, -2 penultimate...) takes that layer's output,
  through the final layer norm only when ``norm_hidden`` (SD1/SD2 yes, SDXL/SD3 no). A layer deeper
  than the tower falls back to the last layer, as in ComfyUI. The pooled vector is the final-normed
  end-of-text token, through the text projection when ``projected_pooled`` (a tower without a
  projection hands the pooled vector as it is: ComfyUI's identity projection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from core.models.clip import CLIPTextModel
from core.models.t5 import T5Encoder
from core.text.chunking import ChunkSpec, TokenizedPrompt, tokenize_weighted
from core.text.embeddings import TowerEmbeddings

#: embedding vectors placed in a batch of windows: (row, position, vector)
Vectors = Sequence[tuple[int, int, torch.Tensor]]


class TextTower(Protocol):
    """One text encoder with its tokenizer and window layout."""

    @property
    def spec(self) -> ChunkSpec: ...

    @property
    def encode_text(self) -> Callable[[str], list[int]]: ...

    def empty_window(self, length: int) -> list[int]: ...

    @property
    def embeddings(self) -> TowerEmbeddings | None: ...

    @property
    def title(self) -> str: ...

    def run(self, ids: torch.Tensor, vectors: Vectors = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(B, L) ids -> float32 hidden states (B, L, D) and pooled vectors (B, P) or None;
        ``vectors``: (row, position, vector) that replace those positions' token embeddings."""
        ...


def _empty_window(spec: ChunkSpec, length: int) -> list[int]:
    window = [t for t in (spec.start, spec.end) if t is not None]
    return window + [spec.pad] * (length - len(window))


def _device(module: torch.nn.Module) -> torch.device:
    return next(iter(module.parameters())).device


@dataclass(frozen=True)
class ClipLayer:
    """Which CLIP output a family uses (see the module notes)."""

    layer: int | None = None
    norm_hidden: bool = True
    projected_pooled: bool = False

    def __post_init__(self) -> None:
        if self.layer is not None and self.layer >= 0:
            raise ValueError(f"layer counts from the end (-1 last, -2 penultimate), not {self.layer}")


@dataclass(frozen=True)
class ClipTower:
    model: CLIPTextModel
    encode_text: Callable[[str], list[int]]
    spec: ChunkSpec
    layer: ClipLayer
    compute_dtype: torch.dtype = torch.float32
    #: where the tower computes (the memory manager's device); None: where its first weight is
    device: torch.device | None = None
    embeddings: TowerEmbeddings | None = None
    title: str = "CLIP"

    def empty_window(self, length: int) -> list[int]:
        return _empty_window(self.spec, length)

    def run(self, ids: torch.Tensor, vectors: Vectors = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        layers = self.model.config.num_layers
        chosen = self.layer.layer if self.layer.layer is not None and -self.layer.layer <= layers else None
        with torch.inference_mode():
            ids = ids.to(self.device or _device(self.model))
            out = self.model(ids, output_layer=chosen, dtype=self.compute_dtype, vectors=vectors)
            if chosen is None:
                hidden = out.last_hidden_state
            else:
                assert out.hidden_state is not None
                hidden = out.hidden_state
                if self.layer.norm_hidden:
                    hidden = self.model.final_norm(hidden)
        pooled = out.pooled
        if self.layer.projected_pooled and out.text_embeds is not None:
            pooled = out.text_embeds
        return hidden.float(), pooled.float()


@dataclass(frozen=True)
class T5Tower:
    model: T5Encoder
    encode_text: Callable[[str], list[int]]
    spec: ChunkSpec
    compute_dtype: torch.dtype = torch.float32
    #: PixArt/Chroma: the empty window for weights is all padding (no end token)
    empty_is_padding: bool = False
    device: torch.device | None = None
    #: T5 takes no embedding vectors: these folders only let a name be found and left out
    embeddings: TowerEmbeddings | None = None
    title: str = "T5"

    def empty_window(self, length: int) -> list[int]:
        if self.empty_is_padding:
            return [self.spec.pad] * length
        return _empty_window(self.spec, length)

    def run(self, ids: torch.Tensor, vectors: Vectors = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        if vectors:
            raise ValueError("a T5 tower takes no embedding vectors")
        with torch.inference_mode():
            hidden = self.model(ids.to(self.device or _device(self.model)), dtype=self.compute_dtype)
        return hidden.float(), None


def tokenize(tower: TextTower, prompt: str) -> TokenizedPrompt:
    return tokenize_weighted(
        prompt, tower.encode_text, tower.spec, embeddings=tower.embeddings, tower=tower.title
    )


def placed_vectors(tokens: TokenizedPrompt) -> list[tuple[int, int, torch.Tensor]]:
    """Where the prompt's embedding vectors go: (window, position, vector)."""
    return [
        (row, pos, t.vector)
        for row, chunk in enumerate(tokens.chunks)
        for pos, t in enumerate(chunk)
        if t.vector is not None
    ]


def encode_weighted(tower: TextTower, tokens: TokenizedPrompt) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(1, windows x L, D) hidden states with prompt weights applied, and the first window's pooled
    vector (1, P) or None."""
    batch = tokens.ids()
    sections = len(batch)
    weighted = tokens.has_weights
    if weighted:
        batch.append(tower.empty_window(max(len(w) for w in batch)))
    hidden, pooled = tower.run(torch.tensor(batch, dtype=torch.long), placed_vectors(tokens))
    z = hidden[:sections]
    if weighted:
        w = torch.tensor(tokens.weights(), dtype=z.dtype, device=z.device)[..., None]
        empty = hidden[-1]
        z = torch.where(w != 1.0, (z - empty) * w + empty, z)
    context = z.reshape(1, -1, z.shape[-1]).cpu()
    first_pooled = None if pooled is None else pooled[0:1].cpu()
    return context, first_pooled
