"""From a weighted prompt to the token windows a text encoder reads, as ComfyUI builds them.

ComfyUI facts followed (``SDTokenizer.tokenize_with_weights``):

- Each weighted segment (and each piece after an ``embedding:`` cut) is tokenized on its own as one
  *group*; start/end tokens the tokenizer adds are dropped.
- CLIP windows are 77 tokens: start token, up to 75 prompt tokens, end token, then padding (CLIP-L:
  the end token again; OpenCLIP-H/-G: token 0). A group that does not fit in what is left of the
  window moves whole to the next window when it is shorter than 8 tokens; a group of 8 or more is
  cut at the window edge and continues in the next window.
- T5 has no windows: one sequence of the prompt's tokens, the end token (1), then padding (0) up to a
  minimum length (77 for SD3, 256 for Flux).
- Every start, end and padding token has weight 1.0.
- ``embedding:NAME`` (and, as A1111 does, a bare word equal to an embedding's name) is a group of
  the embedding's vectors, one position each, with the segment's weight. A name no file has is
  left out and the rest of its piece tokenized; vectors of another width than the tower's are
  taken out of their window after the layout and the window padded at its end (ComfyUI).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import torch

from core.errors import LoadoutError
from core.text.embeddings import FoundVectors, TowerEmbeddings, embedding_error, width_note
from core.text.prompt import EMBEDDING_PREFIX, parse_weights, split_embeddings, unweighted

log = logging.getLogger(__name__)

CLIP_WINDOW: Final = 77
#: groups at least this long may be cut at a window edge; shorter ones move whole
MAX_WORD_LENGTH: Final = 8
#: the id an embedding vector's position carries (its token embedding is replaced by the vector)
EMBEDDING_ID: Final = 0


@dataclass(frozen=True)
class ChunkSpec:
    """How one encoder's token windows are laid out (ComfyUI's tokenizer options, typed).

    ``max_length`` None: a single window of any length (T5).
    """

    start: int | None
    end: int | None
    pad: int
    max_length: int | None = CLIP_WINDOW
    pad_to_max_length: bool = True
    min_length: int | None = None
    max_word_length: int = MAX_WORD_LENGTH

    def __post_init__(self) -> None:
        specials = (self.start is not None) + (self.end is not None)
        if self.max_length is not None and self.max_length <= specials:
            raise ValueError(f"max_length {self.max_length} leaves no room for prompt tokens")

    @classmethod
    def clip(cls, *, pad_with_end: bool) -> ChunkSpec:
        """CLIP-L pads with its end token; OpenCLIP-H and -G pad with 0."""
        return cls(start=49406, end=49407, pad=49407 if pad_with_end else 0)

    @classmethod
    def t5(cls, *, min_length: int) -> ChunkSpec:
        return cls(start=None, end=1, pad=0, max_length=None, pad_to_max_length=False, min_length=min_length)


@dataclass(frozen=True)
class WeightedToken:
    """One position: token id, its weight, and the 1-based group it came from (0: start/end/pad);
    ``vector``: an embedding's vector that replaces the token's (its id is :data:`EMBEDDING_ID`)."""

    id: int
    weight: float
    group: int = 0
    vector: torch.Tensor | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TokenizedPrompt:
    """The windows of one prompt for one encoder, the ``embedding:`` names no file has, the
    embedding files used (name, file) and why any was left out of this tower."""

    chunks: tuple[tuple[WeightedToken, ...], ...]
    missing_embeddings: tuple[str, ...] = field(default=())
    used_embeddings: tuple[tuple[str, str], ...] = field(default=())
    notes: tuple[str, ...] = field(default=())

    def ids(self) -> list[list[int]]:
        return [[t.id for t in chunk] for chunk in self.chunks]

    def weights(self) -> list[list[float]]:
        return [[t.weight for t in chunk] for chunk in self.chunks]

    @property
    def has_weights(self) -> bool:
        return any(t.weight != 1.0 for chunk in self.chunks for t in chunk)

    @property
    def has_vectors(self) -> bool:
        return any(t.vector is not None for chunk in self.chunks for t in chunk)


Group = list[tuple[int, float, torch.Tensor | None]]


@dataclass
class _Found:
    """What the embedding look-ups of one prompt found."""

    embeddings: TowerEmbeddings | None
    missing: list[str] = field(default_factory=list)
    used: dict[str, str] = field(default_factory=dict)
    widths: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (vectors, width)

    def lookup(self, name: str, *, bare: bool = False) -> FoundVectors | None:
        if self.embeddings is None:
            return None
        try:
            found = self.embeddings.lookup(name, bare=bare)
        except LoadoutError as exc:
            raise embedding_error(name, exc) from None
        if found is not None:
            self.used.setdefault(found.name, str(found.path))
            self.widths.setdefault(found.name, (int(found.vectors.shape[0]), int(found.vectors.shape[-1])))
        return found


def _vectors_group(found: FoundVectors, weight: float) -> Group:
    return [(EMBEDDING_ID, weight, row) for row in found.vectors]


def _embedding_piece(piece: str, weight: float, found: _Found) -> tuple[Group, str]:
    """An ``embedding:NAME rest`` piece: the embedding's group (empty when no file has NAME) and
    the text left to tokenize (ComfyUI's ``_try_get_embedding``: a name ending in commas is tried
    without them, the commas going back to the text)."""
    words = piece[len(EMBEDDING_PREFIX) :].strip("\n").split()
    if not words:
        return [], ""
    name, rest = words[0], " ".join(words[1:])
    vectors = found.lookup(name)
    if vectors is None:
        stripped = name.strip(",")
        if len(stripped) < len(name):
            vectors = found.lookup(stripped)
            rest = f"{name[len(stripped) :]} {rest}"
        if vectors is None:
            found.missing.append(stripped)
            log.warning("embedding:%s was not found; it was left out of the prompt", stripped)
            return [], rest
    return _vectors_group(vectors, weight), rest


def _text_groups(text: str, weight: float, encode: Callable[[str], list[int]], found: _Found) -> list[Group]:
    """Plain text as groups: A1111's bare embedding names cut it, the rest is tokenized."""
    pattern = found.embeddings.bare_pattern() if found.embeddings is not None else None
    groups: list[Group] = []
    start = 0
    for m in pattern.finditer(text) if pattern is not None else ():
        vectors = found.lookup(m.group(0), bare=True)
        if vectors is None:
            continue
        before = text[start : m.start()]
        if before:
            groups.append([(t, weight, None) for t in encode(before)])
        groups.append(_vectors_group(vectors, weight))
        start = m.end()
    rest = text[start:]
    if rest:
        groups.append([(t, weight, None) for t in encode(rest)])
    return groups


def _groups(
    prompt: str, encode: Callable[[str], list[int]], found: _Found, weighted: bool = True
) -> list[Group]:
    groups: list[Group] = []
    for segment in parse_weights(prompt) if weighted else unweighted(prompt):
        for piece in split_embeddings(segment.text):
            text = piece
            if piece.startswith(EMBEDDING_PREFIX):
                group, text = _embedding_piece(piece, segment.weight, found)
                if group:
                    groups.append(group)
            if text:
                groups += _text_groups(text, segment.weight, encode, found)
    return groups


def _drop_other_widths(
    windows: list[list[WeightedToken]], spec: ChunkSpec, width: int | None
) -> list[list[WeightedToken]]:
    """Vectors of another width than the tower's out of each window, the window padded at its end
    by as many positions (ComfyUI's ``process_tokens``)."""
    out = []
    for window in windows:
        kept = [t for t in window if t.vector is None or t.vector.shape[-1] == width]
        kept += [WeightedToken(spec.pad, 1.0)] * (len(window) - len(kept))
        out.append(kept)
    return out


def tokenize_weighted(
    prompt: str,
    encode: Callable[[str], list[int]],
    spec: ChunkSpec,
    *,
    weighted: bool = True,
    embeddings: TowerEmbeddings | None = None,
    tower: str = "",
) -> TokenizedPrompt:
    """``prompt`` in windows laid out by ``spec``; ``encode`` gives a text's ids without specials.
    ``weighted`` False: brackets are text (Z-Image's Qwen3: ComfyUI tokenizes with weights off).
    ``embeddings``: where this tower finds embedding names (None: none is found); ``tower``: its
    title, for the notes."""
    found = _Found(embeddings)
    groups = _groups(prompt, encode, found, weighted)
    reserve = 0 if spec.end is None else 1
    limit = None if spec.max_length is None else spec.max_length - reserve

    def new_window() -> list[WeightedToken]:
        return [] if spec.start is None else [WeightedToken(spec.start, 1.0)]

    def close(window: list[WeightedToken], pad_to: int | None) -> None:
        if spec.end is not None:
            window.append(WeightedToken(spec.end, 1.0))
        if pad_to is not None and len(window) < pad_to:
            window.extend([WeightedToken(spec.pad, 1.0)] * (pad_to - len(window)))

    windows = [new_window()]
    for index, group in enumerate(groups, start=1):
        tokens = [WeightedToken(t, w, index, v) for t, w, v in group]
        splittable = len(tokens) >= spec.max_word_length
        while tokens:
            window = windows[-1]
            if limit is None or len(window) + len(tokens) <= limit:
                window.extend(tokens)
                break
            room = limit - len(window)
            if splittable:
                window.extend(tokens[:room])
                tokens = tokens[room:]
            close(window, spec.max_length if spec.pad_to_max_length else None)
            windows.append(new_window())
    last = windows[-1]
    close(last, spec.max_length if spec.pad_to_max_length else None)
    if spec.min_length is not None and len(last) < spec.min_length:
        last.extend([WeightedToken(spec.pad, 1.0)] * (spec.min_length - len(last)))
    width = embeddings.width if embeddings is not None else None
    notes = tuple(
        width_note(name, w, tower or "text encoder", width)
        for name, (_, w) in found.widths.items()
        if w != width
    )
    if notes:
        windows = _drop_other_widths(windows, spec, width)
    return TokenizedPrompt(
        tuple(tuple(w) for w in windows), tuple(found.missing), tuple(found.used.items()), notes
    )
