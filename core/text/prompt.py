"""Prompt weighting as ComfyUI reads it: ``(text)`` multiplies the weight by 1.1 (nested groups
multiply again), ``(text:1.3)`` sets it, ``\\(`` and ``\\)`` are literal brackets.

Facts followed (ComfyUI ``sd1_clip``): groups are found by bracket depth over the whole prompt; a
group's weight is the enclosing weight x 1.1 unless the text after its *last* colon reads as a
number, which then replaces it (``(a:b:1.2)`` is "a:b" at 1.2; ``(a:x)`` is "a:x" at 1.1); square
brackets ``[text]`` are plain text (no down-weighting, unlike A1111); an unclosed ``(`` makes the
rest of the prompt one plain segment with the bracket in it; whitespace is kept as typed.
``embedding:NAME`` splits a segment (after a space or line break) so the name can be looked up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from core.values import PROMPT_WEIGHT

#: ComfyUI's factor for a bracket group without an explicit weight
GROUP_FACTOR: Final = 1.1
EMBEDDING_PREFIX: Final = "embedding:"
_ESCAPED_CLOSE, _ESCAPED_OPEN = "\0\1", "\0\2"
_EMBEDDING_SPLIT: Final = re.compile(f"[ \n]{re.escape(EMBEDDING_PREFIX)}")


@dataclass(frozen=True)
class WeightedText:
    text: str
    weight: float


def _groups(text: str) -> list[str]:
    """Top-level pieces: plain runs and bracket groups (with their brackets), by bracket depth.

    A stray ``)`` outside any group drives the depth below zero; what follows stays in the
    current piece until the depth comes back to zero (ComfyUI's reading of unbalanced prompts)."""
    pieces: list[str] = []
    current = ""
    depth = 0
    for char in text:
        if char == "(":
            if depth == 0:
                if current:
                    pieces.append(current)
                current = "("
            else:
                current += char
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                pieces.append(current + ")")
                current = ""
            else:
                current += char
        else:
            current += char
    if current:
        pieces.append(current)
    return pieces


def _explicit_weight(tail: str) -> float | None:
    """The number after a group's last colon (checked against :data:`PROMPT_WEIGHT`), or None
    when that text is not a number (then it is part of the prompt, as in ComfyUI)."""
    try:
        value = float(tail)
    except ValueError:
        return None
    return PROMPT_WEIGHT.check(value)


def _weigh(text: str, weight: float) -> list[WeightedText]:
    out: list[WeightedText] = []
    for piece in _groups(text):
        if len(piece) >= 2 and piece[0] == "(" and piece[-1] == ")":
            inner = piece[1:-1]
            inner_weight = weight * GROUP_FACTOR
            if PROMPT_WEIGHT.problem(inner_weight) is not None:  # ((((...)))) nested past the range
                raise PROMPT_WEIGHT.error(f"brackets nested so deep give {PROMPT_WEIGHT.name} past the range")
            colon = inner.rfind(":")
            if colon > 0 and (explicit := _explicit_weight(inner[colon + 1 :])) is not None:
                inner, inner_weight = inner[:colon], explicit
            out += _weigh(inner, inner_weight)
        else:
            out.append(WeightedText(piece, weight))
    return out


def _unescape(text: str) -> str:
    return text.replace(_ESCAPED_CLOSE, ")").replace(_ESCAPED_OPEN, "(")


def parse_weights(prompt: str) -> list[WeightedText]:
    """The prompt as (text, weight) segments in order, escapes resolved."""
    escaped = prompt.replace("\\)", _ESCAPED_CLOSE).replace("\\(", _ESCAPED_OPEN)
    return [WeightedText(_unescape(s.text), s.weight) for s in _weigh(escaped, 1.0)]


def unweighted(prompt: str) -> list[WeightedText]:
    """The prompt as one segment of weight 1 (a family with weights off: ComfyUI's
    ``disable_weights``), ``\\(`` and ``\\)`` still read as brackets, as ComfyUI does."""
    return [WeightedText(prompt.replace("\\)", ")").replace("\\(", "("), 1.0)]


def split_embeddings(text: str) -> list[str]:
    """A segment cut before each `` embedding:`` / ``\\nembedding:`` (the prefix kept on the piece
    that follows), empty pieces dropped."""
    parts = _EMBEDDING_SPLIT.split(text)
    pieces = parts[:1] + [EMBEDDING_PREFIX + p for p in parts[1:]]
    return [p for p in pieces if p]
