"""Gemma's SentencePiece tokenizer, from the model bytes a file carries.

Comfy-Org's ``gemma_2_2b.safetensors`` (and Gemma-3 repacks) carry the SentencePiece model inside,
as the uint8 tensor ``spiece_model``; ComfyUI tokenizes from it (``SPieceTokenizer``): no BOS/EOS
from SentencePiece itself (the start token is added by the window layout), the text split at the
special tokens of the family (Gemma-2: ``<end_of_turn>`` = 107), each piece encoded on its own.
Gemma's model has no dummy prefix and no normalisation, so this is also what transformers'
``GemmaTokenizer`` gives (tests/core/text/llm prove it on a model trained for the test).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sentencepiece
import torch

from core.errors import LoadoutError

SPIECE_KEY = "spiece_model"


class SentencePieceMissing(LoadoutError):
    code = "tokenizer_missing"


class SpmTokenizer:
    """Text -> ids with a SentencePiece model; ``special`` tokens typed in the text become their id."""

    def __init__(self, model: bytes, special: Mapping[str, int] | None = None) -> None:
        try:
            self._sp = sentencepiece.SentencePieceProcessor(model_proto=model)
        except (RuntimeError, TypeError) as exc:
            raise SentencePieceMissing(
                "The SentencePiece model in the text-encoder file cannot be read",
                why=str(exc)[:200],
                fix="get the text-encoder file again (Comfy-Org's gemma_2_2b.safetensors carries it)",
            ) from exc
        self.special = dict(special or {})
        names = sorted(self.special, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(re.escape(n) for n in names) + ")") if names else None

    @property
    def bos_id(self) -> int:
        return int(self._sp.bos_id())

    @property
    def pad_id(self) -> int:
        return int(self._sp.pad_id())

    def encode(self, text: str) -> list[int]:
        if self._split is None:
            return list(self._sp.encode(text))
        out: list[int] = []
        for part in self._split.split(text):
            if part in self.special:
                out.append(self.special[part])
            elif part:
                out += self._sp.encode(part)
        return out

    def decode(self, ids: list[int]) -> str:
        return str(self._sp.decode(ids))


def spiece_bytes(tensor: torch.Tensor, key: str = SPIECE_KEY) -> bytes:
    """The bytes of a tokenizer tensor (``spiece_model``, ``tekken_model``: uint8, any shape)."""
    if tensor.dtype != torch.uint8:
        raise SentencePieceMissing(
            f"The file's {key} tensor is {tensor.dtype}, not bytes",
            why="Comfy-Org's files store their tokenizer as a uint8 tensor",
            fix="get the text-encoder file again",
        )
    return bytes(tensor.contiguous().view(-1).numpy().tobytes())
