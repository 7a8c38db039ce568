"""Gemma's SentencePiece tokenizer read from a file's ``spiece_model`` tensor: ids identical to
transformers' GemmaTokenizer built from the same model, on the prompt set."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

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


def test_a_gemma_gguf_tokenizes_from_its_own_vocabulary(tmp_path: Path) -> None:
    """The pieces, scores and types llama.cpp copies into ``tokenizer.ggml.*`` make the same
    tokenizer again (no spiece_model tensor in a GGUF)."""
    import gguf
    import numpy as np
    import sentencepiece

    from core.text.llm import LUMINA2_GEMMA2, tokenizer_for

    sp = sentencepiece.SentencePieceProcessor(model_proto=gemma_like_spm())
    n = sp.get_piece_size()
    writer = gguf.GGUFWriter(tmp_path / "gemma.gguf", "gemma2")
    writer.add_tokenizer_model("llama")
    writer.add_token_list([sp.id_to_piece(i) for i in range(n)])
    writer.add_token_scores([sp.get_score(i) for i in range(n)])
    kinds = [
        2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in range(n)
    ]
    kinds[sp.piece_to_id("<end_of_turn>")] = kinds[sp.piece_to_id("<start_of_turn>")] = 4
    writer.add_token_types(kinds)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_pad_token_id(0)
    writer.add_unk_token_id(3)
    writer.add_add_space_prefix(False)
    writer.add_tensor("token_embd.weight", np.zeros((n, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    eot = {"<end_of_turn>": sp.piece_to_id("<end_of_turn>")}  # Gemma's is 107; this model's own
    ours = tokenizer_for(
        dataclasses.replace(LUMINA2_GEMMA2, special=MappingProxyType(eot)), tmp_path / "gemma.gguf"
    )
    for prompt in PROMPTS:
        assert ours.encode(prompt) == list(sp.encode(prompt)), prompt
