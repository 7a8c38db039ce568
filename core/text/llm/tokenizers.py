"""The tokenizer of a loaded LLM text encoder: Qwen's from the package vocabulary, Gemma's from
the SentencePiece model inside its file. Never downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from core.files.safetensors import SafetensorsFile
from core.text.llm.families import LlmTowerSpec
from core.text.llm.gguf_vocab import gguf_spm_model
from core.text.llm.qwen_bpe import qwen_tokenizer
from core.text.llm.spm import SPIECE_KEY, SentencePieceMissing, SpmTokenizer, spiece_bytes


class LlmTokenizer(Protocol):
    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without any start/end token added."""
        ...


def spiece_from_file(path: str | os.PathLike[str]) -> bytes:
    """The SentencePiece model a safetensors text-encoder file carries (``spiece_model``)."""
    p = Path(path)
    sf = SafetensorsFile(p)
    if SPIECE_KEY not in set(sf.keys()):
        raise SentencePieceMissing(
            f"{p.name} does not carry its SentencePiece tokenizer",
            why=f"Gemma's tokenizer is read from the file's {SPIECE_KEY} tensor (Comfy-Org's files have it)",
            fix="use Comfy-Org's gemma_2_2b.safetensors, or put the model's tokenizer.model beside the file",
        )
    return spiece_bytes(sf.tensor(SPIECE_KEY))


def tokenizer_for(spec: LlmTowerSpec, path: str | os.PathLike[str] | None) -> LlmTokenizer:
    """The tokenizer ``spec`` names, for the encoder loaded from ``path``."""
    if spec.tokenizer == "qwen":
        return qwen_tokenizer()
    if path is None:
        raise SentencePieceMissing(
            "A SentencePiece tokenizer needs the text-encoder file it travels in",
            why="no file was given",
            fix="load the encoder from its file",
        )
    if Path(path).suffix.lower() == ".gguf":
        return SpmTokenizer(gguf_spm_model(path), spec.special)
    beside = Path(path).with_name("tokenizer.model")  # a Hugging Face folder's own file
    if SPIECE_KEY not in set(SafetensorsFile(Path(path)).keys()) and beside.is_file():
        return SpmTokenizer(beside.read_bytes(), spec.special)
    return SpmTokenizer(spiece_from_file(path), spec.special)
