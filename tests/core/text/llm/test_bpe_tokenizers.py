"""Llama-3 and Mistral Tekken tokenizers from the files artists have: ids identical to transformers'
tokenizers built from the same files, on the prompt set (unicode, weights syntax, typed specials,
a 1,000-token prompt)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core.errors import LoadoutError
from core.text.llm import LlmTowerSpec, tokenizer_for
from core.text.llm.bpe import LLAMA3_PATTERN, BpeVocabularyError, from_tekken, tekken_pattern
from tests.core.text.llm.bpe_vocab import (
    LLAMA_SPECIALS,
    TEKKEN_SPECIALS,
    llama3_tokenizer_json,
    tekken_json,
    write_llama3_gguf,
)
from tests.core.text.llm.prompts import PROMPTS

LLAMA3 = LlmTowerSpec(tokenizer="llama3")
TEKKEN = LlmTowerSpec(tokenizer="tekken")
TYPED = (
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|> a cat<|eot_id|>",
    "[SYSTEM_PROMPT]sys[/SYSTEM_PROMPT][INST]a red fox[/INST]<pad>",
    "HelloWorld CamelCase 1234567 x/y//z\r\n",
)
ALL = (*PROMPTS, *TYPED)


def _hf_folder(folder: Path, tokenizer_json: str) -> Path:
    """A Hugging Face tokenizer folder as Meta's Llama-3.1 repo has it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    return folder


@pytest.fixture(scope="module")
def llama_reference(tmp_path_factory: pytest.TempPathFactory) -> object:
    import transformers

    folder = _hf_folder(tmp_path_factory.mktemp("llama") / "tok", llama3_tokenizer_json())
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def _tekken_reference(folder: Path, data: bytes) -> object:
    """transformers' tokenizer from a tekken.json (its Mistral converter: the file's own pattern)."""
    import transformers
    from transformers.integrations.mistral.tokenizer import MistralConverter

    (folder / "tekken.json").write_bytes(data)
    converted = MistralConverter(str(folder / "tekken.json")).converted()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=converted)


def _ids(reference: object, prompt: str) -> list[int]:
    return list(reference(prompt, add_special_tokens=False)["input_ids"])  # type: ignore[operator]


def test_llama3_tokenizer_json_beside_the_model(llama_reference: object, tmp_path: Path) -> None:
    _hf_folder(tmp_path, llama3_tokenizer_json())
    (tmp_path / "model.safetensors").write_bytes(b"")  # the tokenizer is found by the folder alone
    ours = tokenizer_for(LLAMA3, tmp_path / "model.safetensors")
    for prompt in ALL:
        assert ours.encode(prompt) == _ids(llama_reference, prompt), prompt
    bos = _ids(llama_reference, LLAMA_SPECIALS[0])
    assert len(bos) == 1 and ours.encode(LLAMA_SPECIALS[0]) == bos


def test_llama3_found_in_the_diffusers_sibling_and_in_a_comfyui_install(tmp_path: Path) -> None:
    """HiDream's diffusers folder: text_encoder_4/ beside tokenizer_4/; a ComfyUI install's own
    comfy/text_encoders/llama_tokenizer/tokenizer.json for a file under its models/."""
    _hf_folder(tmp_path / "hidream" / "tokenizer_4", llama3_tokenizer_json())
    enc = tmp_path / "hidream" / "text_encoder_4" / "model-00001-of-00004.safetensors"
    enc.parent.mkdir(parents=True)
    assert tokenizer_for(LLAMA3, enc).encode("a cat") != []
    comfy = tmp_path / "ComfyUI"
    _hf_folder(comfy / "comfy" / "text_encoders" / "llama_tokenizer", llama3_tokenizer_json())
    enc = comfy / "models" / "text_encoders" / "llama_3.1_8b_instruct_fp8_scaled.safetensors"
    enc.parent.mkdir(parents=True)
    beside = tmp_path / "hidream" / "tokenizer_4" / "x"
    assert tokenizer_for(LLAMA3, enc).encode("a cat") == tokenizer_for(LLAMA3, beside).encode("a cat")


def test_llama3_missing_is_refused_naming_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(BpeVocabularyError, match="No Llama-3 tokenizer") as err:
        tokenizer_for(LLAMA3, tmp_path / "llama.safetensors")
    assert str(tmp_path / "tokenizer.json") in (err.value.why or "")
    with pytest.raises(BpeVocabularyError, match="not a readable tokenizer"):
        (tmp_path / "tokenizer.json").write_text("{ not json")
        tokenizer_for(LLAMA3, tmp_path / "llama.safetensors")


def test_llama3_gguf_tokenizes_from_its_own_vocabulary(llama_reference: object, tmp_path: Path) -> None:
    write_llama3_gguf(tmp_path / "llama.gguf")
    ours = tokenizer_for(LLAMA3, tmp_path / "llama.gguf")
    for prompt in ALL:
        assert ours.encode(prompt) == _ids(llama_reference, prompt), prompt


def test_tekken_inside_a_comfy_org_file_as_comfyui_reads_it(tmp_path: Path) -> None:
    """Comfy-Org's mistral_3_small_flux2 file carries tekken.json as the uint8 tensor tekken_model;
    ComfyUI splits with Llama-3's pattern: equal to transformers' converter given that pattern."""
    data = tekken_json(extra_vocab=3)
    path = tmp_path / "mistral_3_small_flux2_bf16.safetensors"
    blob = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    save_file({"tekken_model": blob, "model.norm.weight": torch.ones(4)}, str(path))
    ours = tokenizer_for(TEKKEN, path)
    folder = tmp_path / "ref"
    folder.mkdir()
    reference = _tekken_reference(folder, tekken_json(pattern=LLAMA3_PATTERN, extra_vocab=3))
    for prompt in ALL:
        assert ours.encode(prompt) == _ids(reference, prompt), prompt
    n = len(TEKKEN_SPECIALS)
    assert ours.encode("[INST]<s><pad>") == [3, 1, 11]
    assert min(ours.encode("a cat")) >= n  # byte tokens come after the specials


def test_tekken_with_the_files_own_pattern_equals_transformers(tmp_path: Path) -> None:
    """With the pattern tekken.json names (mistral-common's, transformers'), the ids are the
    reference's too; ComfyUI's Llama-3 split differs on camel case and digit runs (docs/text.md)."""
    data = tekken_json()
    reference = _tekken_reference(tmp_path, data)
    own = from_tekken(data, pattern=tekken_pattern(data))
    for prompt in ALL:
        assert own.encode(prompt) == _ids(reference, prompt), prompt
    comfy = from_tekken(data)
    assert comfy.encode("HelloWorld 1234567") != own.encode("HelloWorld 1234567")
    save_file({"model.norm.weight": torch.ones(4)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "tekken.json").write_bytes(data)  # beside an HF folder's model file
    assert tokenizer_for(TEKKEN, tmp_path / "model.safetensors").encode("HelloWorld 1234567") == comfy.encode(
        "HelloWorld 1234567"
    )


def test_tekken_missing_or_broken_is_refused_in_words(tmp_path: Path) -> None:
    path = tmp_path / "mistral.safetensors"
    save_file({"model.norm.weight": torch.ones(4)}, str(path))
    with pytest.raises(BpeVocabularyError, match="No Mistral"):
        tokenizer_for(TEKKEN, path)
    with pytest.raises(BpeVocabularyError, match="special_tokens"):
        from_tekken(b'{"config": {"default_vocab_size": 10}, "vocab": []}')
    with pytest.raises(BpeVocabularyError, match="not a readable"):
        from_tekken(b"\x00\x01")
    with pytest.raises(LoadoutError, match=r"Mistral \(Tekken\) tokenizer needs the text-encoder file"):
        tokenizer_for(TEKKEN, None)
