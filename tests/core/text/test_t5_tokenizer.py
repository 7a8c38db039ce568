"""T5 tokenizer discovery and ids, with a real SentencePiece model trained in tmp_path and laid out
like a ComfyUI install (tokenizer.json), a Forge install and the Hugging Face cache (spiece.model)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from core.text.t5_tokenizer import (
    COMFYUI_SUBDIR,
    FORGE_SUBDIRS,
    T5Tokenizer,
    T5TokenizerMissing,
    T5TokenizerSearch,
    find_t5_tokenizer,
    installs_from_origins,
)

sentencepiece = pytest.importorskip("sentencepiece")

CORPUS = [
    "a photo of a cat sitting on a red chair, highly detailed",
    "portrait of an astronaut, cinematic lighting, 35mm film",
    "Café crème, naïve façade; Ångström 1234 5678",
    "東京 夜景 and neon signs in the rain",
    "masterpiece, best quality, ultra sharp, trending on artstation",
] * 40
PROMPTS = ["a photo of a cat", "Portrait,   cinematic  lighting!", "Café 東京 1234", "", "unseen wörds xyz"]


@pytest.fixture(scope="module")
def spiece(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spm") / "spiece.model"
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=80, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, minloglevel=2,
    )  # fmt: skip
    out.write_bytes(model.getvalue())
    return out


@pytest.fixture(scope="module")
def tokenizer_json(spiece: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer.json (ComfyUI's folder format) with the model's pieces and scores, laid out as
    Hugging Face's T5 conversion lays it out (Unigram, whitespace split + metaspace; NFKC stands in
    for the precompiled normalizer, which needs protobuf to extract)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    sp = sentencepiece.SentencePieceProcessor(model_file=str(spiece))
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    tok = Tokenizer(Unigram(pieces, unk_id=2))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()]
    )
    out = tmp_path_factory.mktemp("t5_fast") / "tokenizer.json"
    tok.save(str(out))
    return out


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ids_equal_sentencepiece_and_transformers(prompt: str, spiece: Path, tokenizer_json: Path) -> None:
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spiece))
    expected = sp.encode(prompt)
    assert T5Tokenizer(spiece).encode(prompt) == expected
    assert T5Tokenizer(tokenizer_json).encode(prompt) == expected


def _place(src: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, folder / src.name)
    return folder


def test_search_order(spiece: Path, tokenizer_json: Path, tmp_path: Path) -> None:
    comfy, forge, cache = tmp_path / "ComfyUI", tmp_path / "forge", tmp_path / "hub"
    hf = cache / "models--black-forest-labs--FLUX.1-dev" / "snapshots" / "abc123" / "tokenizer_2"
    _place(spiece, hf)
    search = T5TokenizerSearch(comfyui_installs=(comfy,), forge_installs=(forge,), hf_cache=cache, environ={})
    assert find_t5_tokenizer(search) == hf / "spiece.model"
    _place(spiece, forge / FORGE_SUBDIRS[1])
    assert find_t5_tokenizer(search) == forge / FORGE_SUBDIRS[1] / "spiece.model"
    _place(tokenizer_json, comfy / COMFYUI_SUBDIR)
    assert find_t5_tokenizer(search) == comfy / COMFYUI_SUBDIR / "tokenizer.json"
    env_dir = _place(spiece, tmp_path / "env")
    search_env = T5TokenizerSearch(
        comfyui_installs=(comfy,), hf_cache=cache, environ={"LOADOUT_T5_TOKENIZER": str(env_dir)}
    )
    assert find_t5_tokenizer(search_env) == env_dir / "spiece.model"
    explicit = _place(tokenizer_json, tmp_path / "explicit")
    search_all = T5TokenizerSearch(
        explicit=explicit / "tokenizer.json", comfyui_installs=(comfy,), environ={}
    )
    assert find_t5_tokenizer(search_all) == explicit / "tokenizer.json"
    assert T5Tokenizer.find(search).encode("a photo") == T5Tokenizer(spiece).encode("a photo")


def test_hf_home_and_hub_cache_variables(spiece: Path, tmp_path: Path) -> None:
    snap = tmp_path / "home" / "hub" / "models--google--t5-v1_1-xxl" / "snapshots" / "r1"
    _place(spiece, snap)
    assert (
        find_t5_tokenizer(T5TokenizerSearch(environ={"HF_HOME": str(tmp_path / "home")}))
        == snap / "spiece.model"
    )
    hub = T5TokenizerSearch(environ={"HF_HUB_CACHE": str(tmp_path / "home" / "hub")})
    assert find_t5_tokenizer(hub) == snap / "spiece.model"


def test_none_found_lists_places_and_says_where_to_put_one(tmp_path: Path) -> None:
    search = T5TokenizerSearch(
        comfyui_installs=(tmp_path / "ComfyUI",), hf_cache=tmp_path / "hub", environ={}
    )
    with pytest.raises(T5TokenizerMissing) as err:
        find_t5_tokenizer(search)
    msg = err.value.message
    assert str(tmp_path / "ComfyUI" / COMFYUI_SUBDIR) in msg and "models--google--t5-v1_1-xxl" in msg
    assert "LOADOUT_T5_TOKENIZER" in msg and "tokenizer_2" in msg


def test_bad_files_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "spiece.model"
    junk.write_bytes(b"not a model")
    with pytest.raises(T5TokenizerMissing, match="not a readable"):
        T5Tokenizer(junk)
    other = tmp_path / "other" / "spiece.model"
    other.parent.mkdir()
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=50, minloglevel=2
    )  # default ids: unk 0, bos 1, eos 2 - not T5's
    other.write_bytes(model.getvalue())
    with pytest.raises(T5TokenizerMissing, match="not a T5 tokenizer"):
        T5Tokenizer(other)


def test_installs_from_library_origins() -> None:
    comfy, forge = installs_from_origins(
        ["comfyui:/a/ComfyUI", "a1111:/b/forge", "folder", "comfyui:/a/ComfyUI"]
    )
    assert comfy == (Path("/a/ComfyUI"),) and forge == (Path("/b/forge"),)
