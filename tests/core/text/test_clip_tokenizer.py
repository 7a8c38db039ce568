"""CLIP tokenizer ids against open_clip's own tokenizer and transformers' CLIPTokenizer (ComfyUI's).

open_clip is installed without torchvision, so its ``__init__`` cannot import: the reference
``open_clip.tokenizer`` module is loaded under a bare package module whose path is the install dir.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from core.text import vocab as vocab_mod
from core.text.clip_tokenizer import ClipTokenizer
from core.text.vocab import END_ID, START_ID, VocabularyMissing, find_vocab_file, load_vocabulary

transformers = pytest.importorskip("transformers")

#: prompts on which open_clip and ComfyUI (transformers) agree
AGREE = [
    "a photo of a cat",
    "Café crème brûlée, naïve façade, Ångström, Øresund",
    "🐱🔥 emoji ❤️ family 👩‍👩‍👧 flags 🇯🇵",
    "東京タワー 夜景, 한국어, Привет мир, العربية, हिन्दी",
    "hello!!! ... ??? --- ;;; ((( ))) [[[ ]]] {x} <y> @#$%^&*",
    "(masterpiece:1.2), best quality, (detailed), [square]",
    "it's don't we're I'll they've she'd I'm",
    "12345 3.14 1e-3 0x1F 2024-05-01",
    "tab\tnew\nline   spaces\r\n and  more",
    "   leading and trailing   ",
    "a\u0301 combining, e\u0302 too",
    "x" * 300,
    " ".join(["word"] * 120),
    "UPPER lower MiXeD",
    "",
]
#: prompts where open_clip's ftfy/HTML clean-up changes the text and ComfyUI's tokenizer does not
DIFFER = ["“curly” ‘quotes’", "&amp; &lt;b&gt;", "ﬁne ligature", "ＦＵＬＬＷＩＤＴＨ", "ǅ digraph"]


@pytest.fixture(scope="module")
def open_clip_ref() -> Any:
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("open_clip_torch is not installed")
    saved = {k: v for k, v in sys.modules.items() if k == "open_clip" or k.startswith("open_clip.")}
    pkg = types.ModuleType("open_clip")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["open_clip"] = pkg
    try:
        module = importlib.import_module("open_clip.tokenizer")
        return module.SimpleTokenizer()
    finally:
        for k in [k for k in sys.modules if k == "open_clip" or k.startswith("open_clip.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def hf_ref(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """transformers' CLIPTokenizer from vocab.json/merges.txt, the files ComfyUI's sd1_tokenizer holds."""
    v = load_vocabulary()
    folder = tmp_path_factory.mktemp("sd1_tokenizer")
    (folder / "vocab.json").write_text(json.dumps(v.vocab), encoding="utf-8")
    merges = "\n".join(f"{a} {b}" for a, b in v.merges)
    (folder / "merges.txt").write_text(f"#version: 0.2\n{merges}\n", encoding="utf-8")
    return transformers.CLIPTokenizer.from_pretrained(str(folder))


def test_vocabulary_is_clips_table() -> None:
    v = load_vocabulary()
    assert len(v.vocab) == 49408 and sorted(v.vocab.values()) == list(range(49408))
    assert v.vocab["<|startoftext|>"] == START_ID and v.vocab["<|endoftext|>"] == END_ID
    assert v.vocab["a</w>"] == 320 and v.vocab["photo</w>"] == 1125  # ids every SD user has seen
    assert v.source.name == "bpe_simple_vocab_16e6.txt.gz" and "open_clip" in str(v.source.parent)


@pytest.mark.parametrize("prompt", AGREE)
def test_ids_equal_open_clip_and_transformers(prompt: str, open_clip_ref: Any, hf_ref: Any) -> None:
    ours = ClipTokenizer().encode(prompt)
    assert ours == open_clip_ref.encode(prompt)
    assert ours == hf_ref(prompt, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("prompt", DIFFER)
def test_comfyui_cleaning_follows_transformers_where_open_clip_differs(
    prompt: str, open_clip_ref: Any, hf_ref: Any
) -> None:
    comfy, oc = ClipTokenizer(), ClipTokenizer(cleaning="open_clip")
    assert comfy.encode(prompt) == hf_ref(prompt, add_special_tokens=False)["input_ids"]
    assert oc.encode(prompt) == open_clip_ref.encode(prompt)
    assert comfy.encode(prompt) != oc.encode(prompt)  # the difference docs/text.md lists is real


@pytest.mark.parametrize("prompt", AGREE + DIFFER + ["<|endoftext|> typed"])
def test_open_clip_cleaning_equals_open_clip_everywhere(prompt: str, open_clip_ref: Any) -> None:
    assert ClipTokenizer(cleaning="open_clip").encode(prompt) == open_clip_ref.encode(prompt)


def test_typed_end_marker_is_the_end_token_as_in_transformers(hf_ref: Any) -> None:
    text = "a <|endoftext|> b"
    assert ClipTokenizer().encode(text) == hf_ref(text, add_special_tokens=False)["input_ids"]
    assert END_ID in ClipTokenizer().encode(text)


def test_missing_vocabulary_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_dist(name: str) -> Any:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(vocab_mod.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(vocab_mod.importlib.metadata, "distribution", no_dist)
    with pytest.raises(VocabularyMissing) as err:
        find_vocab_file()
    assert "Install open_clip_torch==3.3.0 without its dependencies" in err.value.message


def test_corrupt_vocabulary_file_is_refused(tmp_path: Path) -> None:
    import gzip

    bad = tmp_path / "bpe_simple_vocab_16e6.txt.gz"
    bad.write_bytes(gzip.compress(b"#version\na b\n"))
    with pytest.raises(VocabularyMissing, match="merges"):
        load_vocabulary(bad)
    bad.write_bytes(b"not gzip")
    with pytest.raises(VocabularyMissing, match="not a readable"):
        load_vocabulary(bad)


def test_bad_cleaning_name() -> None:
    with pytest.raises(ValueError, match="cleaning"):
        ClipTokenizer(cleaning="a1111")  # type: ignore[arg-type]
