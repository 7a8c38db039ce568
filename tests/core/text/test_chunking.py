"""Prompt weighting and 77-token windows against golden windows made by ComfyUI's own tokenizer
(``data/comfyui_clip_windows.json``: ids, weights and group ids for CLIP-L and CLIP-G)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import LoadoutError
from core.text.chunking import ChunkSpec, tokenize_weighted
from core.text.clip_tokenizer import ClipTokenizer
from core.text.prompt import WeightedText, parse_weights

GOLDEN = json.loads((Path(__file__).parent / "data" / "comfyui_clip_windows.json").read_text("utf-8"))[
    "cases"
]


@pytest.fixture(scope="module")
def clip() -> ClipTokenizer:
    return ClipTokenizer()


@pytest.mark.parametrize("case", GOLDEN, ids=[repr(c["prompt"][:24]) for c in GOLDEN])
def test_windows_equal_comfyui(case: dict[str, object], clip: ClipTokenizer) -> None:
    for name, pad_with_end in (("clip_l", True), ("clip_g", False)):
        got = tokenize_weighted(str(case["prompt"]), clip.encode, ChunkSpec.clip(pad_with_end=pad_with_end))
        expected = case[name]
        assert isinstance(expected, list)
        assert got.ids() == [c["ids"] for c in expected]
        assert got.weights() == [c["weights"] for c in expected]  # exact floats: 1.1 * 1.1 as ComfyUI
        assert [[t.group for t in w] for w in got.chunks] == [c["groups"] for c in expected]
        assert all(len(w) == 77 for w in got.chunks)


def test_golden_covers_the_hard_cases() -> None:
    """The golden file holds multi-window prompts, a cut long group and dropped embeddings."""
    windows = [len(c["clip_l"]) for c in GOLDEN]
    assert max(windows) >= 3 and windows.count(1) > 5


def test_short_group_moves_whole_long_group_is_cut(clip: ClipTokenizer) -> None:
    spec = ChunkSpec.clip(pad_with_end=True)
    word = "(" + "a " * 74 + ")"  # 74 tokens at weight 1.1 fill the first window to 75 with...
    short = tokenize_weighted(word + "bb cc dd", clip.encode, spec)
    assert short.ids()[0][75:] == [49407, 49407]  # ...then the 3-token group does not fit: moved whole
    assert short.ids()[1][:4] == [49406, *clip.encode("bb cc dd")]
    long_group = "x " * 80
    cut = tokenize_weighted(long_group, clip.encode, spec)
    assert cut.ids()[0][1:76] == clip.encode(long_group)[:75] and cut.ids()[0][76] == 49407
    assert cut.ids()[1][1:6] == clip.encode(long_group)[75:]


def test_parse_weights_facts() -> None:
    assert parse_weights("a (b) ((c)) (d:0.5) [e]") == [
        WeightedText("a ", 1.0),
        WeightedText("b", 1.1),
        WeightedText(" ", 1.0),
        WeightedText("c", 1.1 * 1.1),
        WeightedText(" ", 1.0),
        WeightedText("d", 0.5),
        WeightedText(" [e]", 1.0),
    ]
    assert parse_weights(r"\(x\) (y:2)") == [WeightedText("(x) ", 1.0), WeightedText("y", 2.0)]
    assert parse_weights("(a:b:1.5)") == [WeightedText("a:b", 1.5)]
    assert parse_weights("(a:x)") == [WeightedText("a:x", 1.1)]
    assert parse_weights("(a (b:2) c:0.5)") == [
        WeightedText("a ", 0.5),
        WeightedText("b", 2.0),
        WeightedText(" c", 0.5),
    ]


@pytest.mark.parametrize("bad", ["(x:nan)", "(x:inf)", "(x:-inf)"])
def test_non_finite_weight_is_refused(bad: str) -> None:
    with pytest.raises(LoadoutError) as err:
        parse_weights(bad)
    assert err.value.code == "bad_prompt_weight"


def test_t5_layout_one_sequence_end_then_padding_to_minimum() -> None:
    def encode(text: str) -> list[int]:
        return [10 + len(w) for w in text.split()]

    spec = ChunkSpec.t5(min_length=8)
    got = tokenize_weighted("aa bbb (c:1.5)", encode, spec)
    assert got.ids() == [[12, 13, 11, 1, 0, 0, 0, 0]]
    assert got.weights() == [[1.0, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0]]
    long = tokenize_weighted("w " * 300, encode, spec)
    assert len(long.chunks) == 1 and len(long.ids()[0]) == 301  # no windows, no cap


def test_embedding_names_are_reported_and_left_out(clip: ClipTokenizer) -> None:
    got = tokenize_weighted("cat embedding:face, smiling", clip.encode, ChunkSpec.clip(pad_with_end=True))
    assert got.missing_embeddings == ("face",)
    assert got.ids()[0][1:5] == [*clip.encode("cat"), *clip.encode(", smiling"), 49407]


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="no room"):
        ChunkSpec(start=1, end=2, pad=0, max_length=2)
