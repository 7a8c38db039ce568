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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from core.text.prompt import EMBEDDING_PREFIX, parse_weights, split_embeddings, unweighted

log = logging.getLogger(__name__)

CLIP_WINDOW: Final = 77
#: groups at least this long may be cut at a window edge; shorter ones move whole
MAX_WORD_LENGTH: Final = 8


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
    """One position: token id, its weight, and the 1-based group it came from (0: start/end/pad)."""

    id: int
    weight: float
    group: int = 0


@dataclass(frozen=True)
class TokenizedPrompt:
    """The windows of one prompt for one encoder, and the ``embedding:`` names that were dropped."""

    chunks: tuple[tuple[WeightedToken, ...], ...]
    missing_embeddings: tuple[str, ...] = field(default=())

    def ids(self) -> list[list[int]]:
        return [[t.id for t in chunk] for chunk in self.chunks]

    def weights(self) -> list[list[float]]:
        return [[t.weight for t in chunk] for chunk in self.chunks]

    @property
    def has_weights(self) -> bool:
        return any(t.weight != 1.0 for chunk in self.chunks for t in chunk)


def _embedding_piece(piece: str, missing: list[str]) -> str:
    """What is left of an ``embedding:NAME rest`` piece once NAME is dropped.

    Textual-inversion embeddings are not supported yet: a name is handled as ComfyUI handles one it
    cannot find (dropped, the rest of the piece tokenized as text), and reported."""
    words = piece[len(EMBEDDING_PREFIX) :].strip("\n").split()
    if not words:
        return ""
    name, rest = words[0], " ".join(words[1:])
    stripped = name.strip(",")
    missing.append(stripped)
    log.warning("embedding:%s is not supported yet; it was left out of the prompt", stripped)
    if len(stripped) < len(name):
        return f"{name[len(stripped) :]} {rest}"
    return rest


def _groups(
    prompt: str, encode: Callable[[str], list[int]], missing: list[str], weighted: bool = True
) -> list[list[tuple[int, float]]]:
    groups: list[list[tuple[int, float]]] = []
    for segment in parse_weights(prompt) if weighted else unweighted(prompt):
        for piece in split_embeddings(segment.text):
            text = _embedding_piece(piece, missing) if piece.startswith(EMBEDDING_PREFIX) else piece
            if text:
                groups.append([(t, segment.weight) for t in encode(text)])
    return groups


def tokenize_weighted(
    prompt: str, encode: Callable[[str], list[int]], spec: ChunkSpec, *, weighted: bool = True
) -> TokenizedPrompt:
    """``prompt`` in windows laid out by ``spec``; ``encode`` gives a text's ids without specials.
    ``weighted`` False: brackets are text (Z-Image's Qwen3: ComfyUI tokenizes with weights off)."""
    missing: list[str] = []
    groups = _groups(prompt, encode, missing, weighted)
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
        tokens = [WeightedToken(t, w, index) for t, w in group]
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
    return TokenizedPrompt(tuple(tuple(w) for w in windows), tuple(missing))
