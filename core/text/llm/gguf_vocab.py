"""A SentencePiece tokenizer rebuilt from the vocabulary a GGUF file carries (``tokenizer.ggml.*``).

llama.cpp's converter copies a SentencePiece model's pieces, scores and piece types into the file
(``tokenizer.ggml.model`` = "llama"); the same three lists, with Gemma's settings (BPE, byte
fallback, no dummy prefix unless ``tokenizer.ggml.add_space_prefix``, identity normalisation) and
the special ids, make the model proto again, so a Gemma GGUF tokenizes as its safetensors twin.
Qwen GGUFs (``gpt2``-style vocabularies) use the package vocabulary: it is the same one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.files.gguf import read_gguf_header
from core.text.llm.spm import SentencePieceMissing

#: sentencepiece's TrainerSpec.ModelType values
_BPE = 2


def _vocabulary(path: str | os.PathLike[str]) -> tuple[list[str], list[float], list[int]]:
    """The pieces, scores and types, read with the reference reader (arrays of 256k items)."""
    import gguf

    fields = gguf.GGUFReader(path).fields

    def items(key: str) -> list[Any]:
        field = fields.get(key)
        return [] if field is None else [field.parts[i] for i in field.data]

    tokens = [bytes(p).decode("utf-8", errors="replace") for p in items("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in items("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in items("tokenizer.ggml.token_type")]
    return tokens, scores, types


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
