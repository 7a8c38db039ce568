"""A SentencePiece tokenizer rebuilt from the vocabulary a GGUF file carries (``tokenizer.ggml.*``).

llama.cpp's converter copies a SentencePiece model's pieces, scores and piece types into the file
(``tokenizer.ggml.model`` = "llama"); the same three lists, with Gemma's settings (BPE, byte
fallback, no dummy prefix unless ``tokenizer.ggml.add_space_prefix``, identity normalisation) and
the special ids, make the model proto again, so a Gemma GGUF tokenizes as its safetensors twin.
Qwen GGUFs (``gpt2``-style vocabularies) use the package vocabulary: it is the same one. Llama-3
and Mistral (Tekken) GGUFs carry a ``gpt2``-style vocabulary (tokens, merges, token types), rebuilt
into a byte-level BPE (:func:`gguf_bpe_tokenizer`) split with Llama-3's pattern as ComfyUI splits
both (core/text/llm/bpe.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.files.gguf import read_gguf_header
from core.text.llm.bpe import LLAMA3_PATTERN, BpeTokenizer, BpeVocabularyError, from_gguf_vocab
from core.text.llm.spm import SentencePieceMissing

#: sentencepiece's TrainerSpec.ModelType values
_BPE = 2


#: ``tokenizer.ggml.pre`` values whose split is Llama-3's (as ComfyUI splits Llama-3 and Tekken text)
_LLAMA3_SPLIT = frozenset({"llama-bpe", "llama3", "tekken", "smaug-bpe"})


def _arrays(path: str | os.PathLike[str], *keys: str) -> list[list[Any]]:
    """Array fields, read with the reference reader (arrays of 256k items)."""
    import gguf

    fields = gguf.GGUFReader(path).fields

    def items(key: str) -> list[Any]:
        field = fields.get(key)
        return [] if field is None else [field.parts[i] for i in field.data]

    return [items(k) for k in keys]


def _vocabulary(path: str | os.PathLike[str]) -> tuple[list[str], list[float], list[int]]:
    """The pieces, scores and types."""
    toks, scs, tys = _arrays(
        path, "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"
    )
    tokens = [bytes(p).decode("utf-8", errors="replace") for p in toks]
    scores = [float(p[0]) for p in scs]
    types = [int(p[0]) for p in tys]
    return tokens, scores, types


def gguf_bpe_tokenizer(path: str | os.PathLike[str]) -> BpeTokenizer:
    """The byte-level BPE tokenizer of a GGUF file's ``gpt2``-style vocabulary (Llama-3, Tekken)."""
    name = Path(path).name
    meta: Mapping[str, Any] = read_gguf_header(path).metadata
    pre = str(meta.get("tokenizer.ggml.pre", ""))
    if meta.get("tokenizer.ggml.model") != "gpt2" or pre not in _LLAMA3_SPLIT:
        raise BpeVocabularyError(
            f"{name} does not carry a Llama-3 or Tekken vocabulary",
            why=f"its tokenizer is {meta.get('tokenizer.ggml.model')!r} with split {pre!r}, "
            f"not 'gpt2' with one of {', '.join(sorted(_LLAMA3_SPLIT))}",
            fix="use a GGUF converted with its tokenizer, or the model's safetensors file",
        )
    toks, merges, tys = _arrays(
        path, "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"
    )
    if not toks or not merges or len(tys) != len(toks):
        raise BpeVocabularyError(
            f"{name}'s vocabulary is incomplete",
            why=f"{len(toks)} tokens, {len(merges)} merges, {len(tys)} token types",
            fix="get the file again",
        )
    return from_gguf_vocab(
        [bytes(p).decode("utf-8") for p in toks],
        [bytes(p).decode("utf-8") for p in merges],
        [int(p[0]) for p in tys],
        pattern=LLAMA3_PATTERN,
    )


def gguf_spm_model(path: str | os.PathLike[str]) -> bytes:
    """The SentencePiece model proto (bytes) of a GGUF file's ``tokenizer.ggml.*`` vocabulary."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    meta: Mapping[str, Any] = read_gguf_header(path).metadata  # scalars (long arrays are summarised)
    tokens, scores, types = _vocabulary(path)
    if meta.get("tokenizer.ggml.model") != "llama" or not tokens or not scores or not types:
        raise SentencePieceMissing(
            f"{Path(path).name} does not carry a SentencePiece vocabulary",
            why="its tokenizer.ggml.* entries are missing or not a SentencePiece ('llama') model",
            fix="use a GGUF converted with its tokenizer, or Comfy-Org's safetensors file",
        )
    if not len(tokens) == len(scores) == len(types):
        raise SentencePieceMissing(
            f"{Path(path).name}'s vocabulary is inconsistent",
            why=f"{len(tokens)} tokens, {len(scores)} scores, {len(types)} types",
            fix="get the file again",
        )
    model = pb.ModelProto()  # type: ignore[attr-defined]  # generated protobuf module
    for piece, score, kind in zip(tokens, scores, types, strict=True):
        model.pieces.add(piece=str(piece), score=float(score), type=int(kind))
    spec = model.trainer_spec
    spec.model_type = _BPE
    spec.byte_fallback = True
    spec.vocab_size = len(tokens)
    for name in ("unk", "bos", "eos", "pad"):
        key = "unknown" if name == "unk" else ("padding" if name == "pad" else name)
        value = meta.get(f"tokenizer.ggml.{key}_token_id")
        setattr(spec, f"{name}_id", int(value) if value is not None else -1)
    norm = model.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", False))
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    return bytes(model.SerializeToString())
