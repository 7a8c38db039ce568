"""Gemma's SentencePiece tokenizer read from a file's ``spiece_model`` tensor: ids identical to
transformers' GemmaTokenizer built from the same model, on the prompt set."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core.text.llm.spm import SentencePieceMissing, SpmTokenizer, spiece_bytes
from core.text.llm.tokenizers import spiece_from_file
from tests.core.text.llm.prompts import PROMPTS
from tests.core.text.llm.spm_model import gemma_like_spm


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> object:
    import transformers

    folder = tmp_path_factory.mktemp("gemma")
    (folder / "tokenizer.model").write_bytes(gemma_like_spm())
    return transformers.GemmaTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> SpmTokenizer:
    """Read back from a safetensors file, as Comfy-Org's gemma_2_2b.safetensors carries it."""
    path = tmp_path_factory.mktemp("file") / "gemma.safetensors"
    model = gemma_like_spm()
    save_file({"spiece_model": torch.frombuffer(bytearray(model), dtype=torch.uint8)}, str(path))
    data = spiece_from_file(path)
    assert data == model
    import sentencepiece

    eot = sentencepiece.SentencePieceProcessor(model_proto=data).piece_to_id("<end_of_turn>")
    return SpmTokenizer(data, {"<end_of_turn>": eot})


@pytest.mark.parametrize("prompt", PROMPTS, ids=range(len(PROMPTS)))
def test_ids_equal_transformers_gemma_tokenizer(reference: object, ours: SpmTokenizer, prompt: str) -> None:
    expected = reference(prompt, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
    assert ours.encode(prompt) == expected
    assert (ours.bos_id, ours.pad_id) == (2, 0)


def test_a_file_without_the_model_is_refused_in_words(tmp_path: Path) -> None:
    path = tmp_path / "gemma.safetensors"
    save_file({"model.norm.weight": torch.ones(4)}, str(path))
    with pytest.raises(SentencePieceMissing, match="does not carry"):
        spiece_from_file(path)
    with pytest.raises(SentencePieceMissing, match="not bytes"):
        spiece_bytes(torch.ones(3))
