"""The Qwen2/Qwen3 byte-level BPE tokenizer, built offline from the vocabulary a package ships.

Qwen (1, 2, 2.5, 3) share one byte-pair vocabulary of 151,643 tokens: Alibaba's ``qwen.tiktoken``
(``base64(token bytes) rank`` per line), which its ``dashscope`` SDK (Apache-2.0) ships in
``dashscope/resources/``. Loadout installs that package with ``--no-deps`` and never imports it: the
file is found through the import system's package location, like CLIP's (core/text/vocab.py).

The tokenizer is what transformers' ``Qwen2Tokenizer`` (ComfyUI's, from its ``qwen25_tokenizer``
folder) is: NFC normalisation, Qwen's split pattern, byte-level BPE with ranks as merge priority,
and 26 added tokens (151643 ``<|endoftext|>`` ... 151668 ``</think>``) matched in the text before
anything else. The byte-pair mechanics are ``tiktoken``'s (merging by rank, the file's own form, is
what transformers' merges-by-order computes: tests/core/text/llm prove the ids equal).
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import sys
import unicodedata
from functools import cache
from pathlib import Path
from typing import Final

import tiktoken

from core.errors import LoadoutError

VOCAB_FILE: Final = "qwen.tiktoken"
PACKAGE: Final = "dashscope"
PIN: Final = "dashscope==2.0.2"
BPE_TOKENS: Final = 151643
SPLIT_PATTERN: Final = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
#: the added tokens of Qwen2.5's tokenizer (ComfyUI's qwen25_tokenizer, used for Qwen3 too), in id
#: order from 151643; ``True``: special (the rest are added tokens that are not "special")
ADDED_TOKENS: Final[tuple[tuple[str, bool], ...]] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
ENDOFTEXT: Final = 151643


class QwenVocabularyMissing(LoadoutError):
    code = "tokenizer_missing"


def find_qwen_vocab() -> Path:
    """Path of ``qwen.tiktoken`` in the installed ``dashscope`` package (not imported)."""
    candidates: list[Path] = []
    bundle = getattr(sys, "_MEIPASS", None)  # a frozen app carries the file
    if bundle is not None:
        candidates.append(Path(bundle) / PACKAGE / VOCAB_FILE)
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "resources" / VOCAB_FILE for p in spec.submodule_search_locations]
    try:
        files = importlib.metadata.distribution(PACKAGE).files or []
        candidates += [Path(str(f.locate())) for f in files if f.name == VOCAB_FILE]
    except importlib.metadata.PackageNotFoundError:
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise QwenVocabularyMissing(
        "The Qwen tokenizer vocabulary (qwen.tiktoken) was not found",
        why="Loadout reads Qwen's byte-pair vocabulary from the dashscope package; it is not installed",
        fix=f"Install {PIN} without its dependencies (the installer and scripts/test do)",
    )


def read_ranks(path: Path) -> dict[bytes, int]:
    """``{token bytes: rank}`` from a tiktoken file; refused in words when it is not Qwen's."""
    try:
        lines = path.read_bytes().splitlines()
        ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in lines if line)}
    except (OSError, ValueError) as exc:
        raise QwenVocabularyMissing(
            f"{path} is not a readable Qwen vocabulary",
            why=str(exc),
            fix=f"Reinstall {PIN} without its dependencies (the installer and scripts/test do)",
        ) from exc
    if len(ranks) != BPE_TOKENS or sorted(ranks.values()) != list(range(BPE_TOKENS)):
        raise QwenVocabularyMissing(
            f"{path} does not hold Qwen's {BPE_TOKENS:,} tokens",
            why=f"it has {len(ranks):,} distinct tokens with ranks that are not 0..{BPE_TOKENS - 1}",
            fix=f"Reinstall {PIN} without its dependencies (the installer and scripts/test do)",
        )
    return ranks


class QwenTokenizer:
    """Text -> Qwen token ids (no special tokens added; added tokens typed in the text are matched)."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._enc = encoding

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)


@cache
def qwen_tokenizer(path: Path | None = None) -> QwenTokenizer:
    """Qwen2.5/Qwen3's tokenizer (see the module notes), built once per process."""
    ranks = read_ranks(find_qwen_vocab() if path is None else path)
    added = {content: BPE_TOKENS + i for i, (content, _) in enumerate(ADDED_TOKENS)}
    return QwenTokenizer(
        tiktoken.Encoding("qwen", pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=added)
    )
