"""Qwen2/Qwen3's tokenizer from the dashscope package's vocabulary: ids identical to transformers'
Qwen2Tokenizer (ComfyUI's class) built from the same vocabulary, and to tiktoken's BPE over it, on
the prompt set (unicode, weights syntax, typed special tokens, a 1,000-token prompt); Z-Image's
template gives Qwen's own ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.text.llm.qwen_bpe import (
    ADDED_TOKENS,
    BPE_TOKENS,
    QwenVocabularyMissing,
    find_qwen_vocab,
    qwen_tokenizer,
    read_ranks,
)
from tests.core.text.llm.prompts import LONG, PROMPTS
from tests.fixtures.qwen_tokenizer_files import write_qwen2_tokenizer


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> object:
    """transformers' Qwen2Tokenizer on vocab.json/merges.txt written from the package's ranks."""
    import transformers

    folder = write_qwen2_tokenizer(tmp_path_factory.mktemp("qwen"))
    return transformers.Qwen2Tokenizer.from_pretrained(str(folder))  # as ComfyUI loads its folder


def test_the_package_vocabulary_is_qwens() -> None:
    ranks = read_ranks(find_qwen_vocab())
    assert len(ranks) == BPE_TOKENS


@pytest.mark.parametrize("prompt", PROMPTS, ids=range(len(PROMPTS)))
def test_ids_equal_transformers_qwen2_tokenizer(reference: object, prompt: str) -> None:
    expected = reference(prompt, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    assert qwen_tokenizer().encode(prompt) == expected


def test_ids_equal_tiktoken_on_the_same_ranks() -> None:
    import unicodedata

    import tiktoken

    from core.text.llm.qwen_bpe import SPLIT_PATTERN

    ranks = read_ranks(find_qwen_vocab())
    added = {c: BPE_TOKENS + i for i, (c, _) in enumerate(ADDED_TOKENS)}
    enc = tiktoken.Encoding("ref", pat_str=SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=added)
    for prompt in PROMPTS:
        assert qwen_tokenizer().encode(prompt) == enc.encode(
            unicodedata.normalize("NFC", prompt), allowed_special="all"
        )


def test_z_image_template_gives_qwens_chat_ids() -> None:
    ids = qwen_tokenizer().encode("<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n")
    # <|im_start|> user \n Hello ␣world <|im_end|> \n <|im_start|> assistant \n (Qwen's ids)
    assert ids == [151644, 872, 198, 9707, 1879, 151645, 198, 151644, 77091, 198]
    assert len(qwen_tokenizer().encode(LONG)) > 1000


def test_a_damaged_vocabulary_is_refused_in_words(tmp_path: Path) -> None:
    bad = tmp_path / "qwen.tiktoken"
    bad.write_text("IQ== 0\nIg== 1\n")
    with pytest.raises(QwenVocabularyMissing, match="151,643"):
        read_ranks(bad)
