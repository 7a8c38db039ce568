"""A SentencePiece model trained for the tests with Gemma's settings (BPE, byte fallback, no dummy
prefix, identity normalisation, digits split, whitespace kept; pad 0, eos 1, bos 2, unk 3, turn
markers as user-defined pieces): the shape of Gemma's tokenizer.model, small."""

from __future__ import annotations

import io
from functools import cache

from tests.core.text.llm.prompts import PROMPTS

_CORPUS = [
    *PROMPTS,
    *(f"a photo of a {w} in the {p}" for w in ("cat", "dog", "fox") for p in ("rain", "sun")),
]


@cache
def gemma_like_spm() -> bytes:
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_CORPUS * 3),
        model_writer=out,
        vocab_size=700,
        model_type="bpe",
        byte_fallback=True,
        add_dummy_prefix=False,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        user_defined_symbols=["<start_of_turn>", "<end_of_turn>"],
        minloglevel=2,
    )
    return out.getvalue()
