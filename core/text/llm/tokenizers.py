"""The tokenizer of a loaded LLM text encoder, never downloaded: Qwen's from the package vocabulary,
Gemma's from the SentencePiece model inside its file, Llama-3's and Mistral's Tekken from the files
artists have (the GGUF's own vocabulary, the ``tekken_model`` inside Comfy-Org's file, a Hugging
Face ``tokenizer.json`` / ``tekken.json`` beside the model or in its ``tokenizer`` folder, a
ComfyUI install's ``llama_tokenizer``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from core.files.safetensors import SafetensorsFile
from core.text.llm.bpe import BpeVocabularyError, from_tekken, from_tokenizer_json
from core.text.llm.families import LlmTowerSpec
from core.text.llm.gguf_vocab import gguf_bpe_tokenizer, gguf_spm_model
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


TEKKEN_KEY = "tekken_model"
_NAMES = {"spm": "SentencePiece", "llama3": "Llama-3", "tekken": "Mistral (Tekken)"}
#: ComfyUI ships Llama-3's tokenizer.json here (HiDream, HunyuanVideo)
COMFY_LLAMA3 = Path("comfy", "text_encoders", "llama_tokenizer", "tokenizer.json")


def _folders(path: Path) -> list[Path]:
    """Where a model's tokenizer files may lie: its own folder, then the diffusers sibling
    (``text_encoder_4/`` -> ``tokenizer_4/``, ``text_encoder/`` -> ``tokenizer/``)."""
    folders = [path.parent]
    stem = path.parent.name
    if stem.startswith("text_encoder"):
        folders.append(path.parent.with_name("tokenizer" + stem[len("text_encoder") :]))
    return folders


def _comfy_installs(path: Path) -> list[Path]:
    """ComfyUI's own Llama-3 tokenizer, for a model inside a ComfyUI install (``models/...``)."""
    return [parent / COMFY_LLAMA3 for parent in path.parents[:5]]


def _missing(path: Path, kind: str, looked: list[Path]) -> BpeVocabularyError:
    shown = "; ".join(str(p) for p in looked)
    return BpeVocabularyError(
        f"No {kind} tokenizer was found for {path.name}",
        why=f"Loadout reads it from the model's own files and never downloads it; looked at: {shown}",
        fix="put the model's tokenizer.json (Hugging Face) beside the file, or use a file that carries it",
    )


def _llama3(path: Path) -> LlmTokenizer:
    if path.suffix.lower() == ".gguf":
        return gguf_bpe_tokenizer(path)
    looked = [f / "tokenizer.json" for f in _folders(path)] + _comfy_installs(path)
    for candidate in looked:
        if candidate.is_file():
            return from_tokenizer_json(candidate.read_bytes(), str(candidate))
    raise _missing(path, "Llama-3", looked)


def _tekken(path: Path) -> LlmTokenizer:
    if path.suffix.lower() == ".gguf":
        return gguf_bpe_tokenizer(path)
    sf = SafetensorsFile(path)
    if TEKKEN_KEY in set(sf.keys()):
        return from_tekken(spiece_bytes(sf.tensor(TEKKEN_KEY), TEKKEN_KEY), f"{path.name}'s {TEKKEN_KEY}")
    looked = [f / n for f in _folders(path) for n in ("tekken.json", "tokenizer.json")]
    for candidate in looked:
        if candidate.is_file():
            data = candidate.read_bytes()
            if candidate.name == "tekken.json":
                return from_tekken(data, str(candidate))
            return from_tokenizer_json(data, str(candidate))
    raise _missing(path, "Mistral (Tekken)", [path, *looked])


def tokenizer_for(spec: LlmTowerSpec, path: str | os.PathLike[str] | None) -> LlmTokenizer:
    """The tokenizer ``spec`` names, for the encoder loaded from ``path``."""
    if spec.tokenizer == "qwen":
        return qwen_tokenizer()
    if path is None:
        raise SentencePieceMissing(
            f"The {_NAMES.get(spec.tokenizer, spec.tokenizer)} tokenizer needs the text-encoder file it "
            "travels with",
            why="no file was given",
            fix="load the encoder from its file",
        )
    if spec.tokenizer == "llama3":
        return _llama3(Path(path))
    if spec.tokenizer == "tekken":
        return _tekken(Path(path))
    if Path(path).suffix.lower() == ".gguf":
        return SpmTokenizer(gguf_spm_model(path), spec.special)
    beside = Path(path).with_name("tokenizer.model")  # a Hugging Face folder's own file
    if SPIECE_KEY not in set(SafetensorsFile(Path(path)).keys()) and beside.is_file():
        return SpmTokenizer(beside.read_bytes(), spec.special)
    return SpmTokenizer(spiece_from_file(path), spec.special)
