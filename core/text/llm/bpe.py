"""Byte-level BPE tokenizers read from the files artists have (Llama-3, Mistral's Tekken).

- A Hugging Face ``tokenizer.json`` (Llama-3.1's, beside a model folder or in a ComfyUI install's
  ``comfy/text_encoders/llama_tokenizer``) is read by the ``tokenizers`` package, the library
  transformers' fast tokenizers are: the ids are transformers' by construction.
- Mistral's Tekken vocabulary (``tekken.json``: base64 token bytes by rank, and special tokens by
  rank) travels inside Comfy-Org's FLUX.2 text-encoder files as the uint8 tensor ``tekken_model``.
  ComfyUI reads it as transformers' ``MistralConverter`` lays it out: the special tokens are ids
  0..N-1 in rank order, a byte token of rank r is id N + r, ranks from ``default_vocab_size - N``
  on are dropped; the text is split with **Llama-3's pattern** (ComfyUI's choice, where
  mistral-common and transformers use the file's own ``config.pattern``: they differ on
  camel-case words and on digit runs, docs/text.md). The byte-pair mechanics are ``tiktoken``'s
  (merging by rank, the file's own form).
- A GGUF file's ``gpt2``-style vocabulary (``tokenizer.ggml.tokens`` / ``merges`` /
  ``token_type``) is rebuilt into the same ``tokenizers`` model: ids are the token list's order,
  control and user-defined tokens are matched in the text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, Final

import tiktoken
import tokenizers
from tokenizers import decoders, models, pre_tokenizers

from core.errors import LoadoutError

#: Llama-3's split pattern (its tokenizer.json; ComfyUI splits Tekken text with it too)
LLAMA3_PATTERN: Final = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: GGUF ``tokenizer.ggml.token_type`` values matched as whole tokens in the text
_CONTROL, _USER_DEFINED = 3, 4


class BpeVocabularyError(LoadoutError):
    code = "tokenizer_missing"


def _unreadable(name: str, why: str) -> BpeVocabularyError:
    return BpeVocabularyError(
        f"{name} is not a readable tokenizer",
        why=why[:300],
        fix="get the file again (or the model's tokenizer.json from where the model came from)",
    )


class BpeTokenizer:
    """Text -> ids with a ``tokenizers`` model; no start/end token added, added tokens typed in the
    text matched as one id (what transformers' fast tokenizer gives with ``add_special_tokens=False``)."""

    def __init__(self, tokenizer: tokenizers.Tokenizer) -> None:
        self._tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))

    def token_id(self, token: str) -> int | None:
        found = self._tok.token_to_id(token)
        return None if found is None else int(found)


def from_tokenizer_json(data: bytes | str, name: str = "tokenizer.json") -> BpeTokenizer:
    """A Hugging Face ``tokenizer.json``'s tokenizer."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return BpeTokenizer(tokenizers.Tokenizer.from_str(text))
    except Exception as exc:  # a bad encoding, or the library's plain Exception
        raise _unreadable(name, str(exc)) from exc


class TekkenTokenizer:
    """Mistral's Tekken vocabulary, laid out and split as ComfyUI does (module notes)."""

    def __init__(self, encoding: tiktoken.Encoding, specials: dict[str, int]) -> None:
        self._enc = encoding
        self.specials = specials

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode(text, allowed_special="all"))

    def decode(self, ids: list[int]) -> str:
        return str(self._enc.decode(ids))


def _tekken_specials(raw: dict[str, Any], name: str) -> dict[str, int]:
    entries = raw.get("special_tokens")
    if not isinstance(entries, list) or not entries:
        raise _unreadable(name, "it has no special_tokens list (a tekken.json before v7)")
    ranks = sorted(int(e["rank"]) for e in entries)
    if ranks != list(range(len(ranks))):
        raise _unreadable(name, "its special tokens' ranks are not 0..N-1")
    return {str(e["token_str"]): int(e["rank"]) for e in entries}


def from_tekken(
    data: bytes | str, name: str = "tekken.json", pattern: str = LLAMA3_PATTERN
) -> TekkenTokenizer:
    """A ``tekken.json``'s tokenizer (the bytes of Comfy-Org's ``tekken_model`` tensor, or the file).
    ``pattern``: the split pattern (ComfyUI: Llama-3's; the file's own is ``config.pattern``)."""
    try:
        raw = json.loads(data)
        config = raw["config"]
        specials = _tekken_specials(raw, name)
        n = len(specials)
        inner = int(config["default_vocab_size"]) - n
        ranks = {base64.b64decode(e["token_bytes"]): n + int(e["rank"]) for e in raw["vocab"][:inner]}
    except BpeVocabularyError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise _unreadable(name, f"{type(exc).__name__}: {exc}") from exc
    if sorted(ranks.values()) != list(range(n, n + len(ranks))):
        raise _unreadable(name, "its vocabulary's ranks are not 0..N-1 with distinct tokens")
    try:
        enc = tiktoken.Encoding("tekken", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    except ValueError as exc:
        raise _unreadable(name, str(exc)) from exc
    return TekkenTokenizer(enc, specials)


def tekken_pattern(data: bytes | str) -> str:
    """The split pattern a ``tekken.json`` names for itself (mistral-common's and transformers')."""
    return str(json.loads(data)["config"]["pattern"])


def from_gguf_vocab(
    tokens: Sequence[str],
    merges: Sequence[str],
    types: Sequence[int],
    *,
    pattern: str = LLAMA3_PATTERN,
    ignore_merges: bool = True,
) -> BpeTokenizer:
    """A ``gpt2``-style GGUF vocabulary (tokens in id order, in byte-level unicode, and ``"a b"``
    merges) as a ``tokenizers`` byte-level BPE. ``ignore_merges``: a word that is a token is kept
    whole (Llama-3's tokenizer.json and llama.cpp's ``llama-bpe``)."""
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    if any(len(p) != 2 for p in pairs):
        raise _unreadable("the GGUF vocabulary", "a merge is not two tokens")
    model = models.BPE(vocab, [(a, b) for a, b in pairs], ignore_merges=ignore_merges, fuse_unk=False)
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    added = [
        tokenizers.AddedToken(t, special=k == _CONTROL, normalized=False)
        for t, k in zip(tokens, types, strict=True)
        if k in (_CONTROL, _USER_DEFINED)
    ]
    tok.add_special_tokens(added)
    return BpeTokenizer(tok)
