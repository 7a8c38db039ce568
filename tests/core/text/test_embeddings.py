"""Textual-inversion embeddings against diffusers' ``load_textual_inversion`` on tiny CLIP towers
with CLIP's real vocabulary and key names: the ids the prompt becomes (the embedding's vectors
where diffusers puts its added tokens) and the hidden states; ComfyUI's rule for weights; A1111's
bare names; the width check; files read without running code."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from safetensors.torch import save_file

from core.errors import LoadoutError
from core.text import PromptEncoder, TextEncoders
from core.text.chunking import ChunkSpec, tokenize_weighted
from core.text.clip_tokenizer import ClipTokenizer
from core.text.embeddings import EmbeddingFolders, TowerEmbeddings, read_embedding
from core.text.vocab import load_vocabulary
from tests.core.text.test_conditioning import close, tiny_pair

transformers = pytest.importorskip("transformers")
diffusers_ti = pytest.importorskip("diffusers.loaders.textual_inversion")


class _Holder(diffusers_ti.TextualInversionLoaderMixin):  # type: ignore[misc,name-defined]
    """The least a diffusers pipeline needs for ``load_textual_inversion``."""

    hf_device_map = None
    components: ClassVar[dict[str, Any]] = {}


@pytest.fixture(scope="module")
def tok() -> ClipTokenizer:
    return ClipTokenizer()


@pytest.fixture
def hf_tokenizer(tmp_path: Path) -> Any:
    """transformers' CLIPTokenizer on CLIP's vocabulary (ComfyUI's sd1_tokenizer files)."""
    v = load_vocabulary()
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.json").write_text(json.dumps(v.vocab), encoding="utf-8")
    merges = "\n".join(f"{a} {b}" for a, b in v.merges)
    (tmp_path / "tok" / "merges.txt").write_text(f"#version: 0.2\n{merges}\n", encoding="utf-8")
    return transformers.CLIPTokenizer.from_pretrained(str(tmp_path / "tok"), pad_token="<|endoftext|>")


def write_a1111_pt(path: Path, vectors: torch.Tensor) -> None:
    """An A1111 textual-inversion .pt as its trainer saves it (with its bookkeeping keys)."""
    torch.save(
        {"string_to_token": {"*": torch.tensor(265)}, "string_to_param": {"*": vectors},
         "name": path.stem, "step": 3000, "sd_checkpoint": "abc123", "sd_checkpoint_name": "sd15"},
        path,
    )  # fmt: skip


def hf_ids(tokenizer: Any, holder: _Holder, prompt: str) -> list[int]:
    converted = holder.maybe_convert_prompt(prompt, tokenizer)
    ids: list[int] = tokenizer(converted, padding="max_length", max_length=77).input_ids
    return ids


def hf_hidden(model: Any, ids: list[list[int]], layer: int | None = None) -> torch.Tensor:
    with torch.no_grad():
        out = model(torch.tensor(ids), output_hidden_states=True)
    return out.last_hidden_state if layer is None else out.hidden_states[layer]


def test_a1111_pt_equals_diffusers_ids_and_hidden_states(
    tmp_path: Path, tok: ClipTokenizer, hf_tokenizer: Any
) -> None:
    ours, ref = tiny_pair(32, projection=False, seed=11)
    vectors = torch.randn(3, 32, generator=torch.Generator().manual_seed(0))
    (tmp_path / "emb").mkdir()
    write_a1111_pt(tmp_path / "emb" / "myemb.pt", vectors)
    holder = _Holder()
    holder.load_textual_inversion(str(tmp_path / "emb" / "myemb.pt"), token="myemb", tokenizer=hf_tokenizer,
                                  text_encoder=ref)  # fmt: skip
    want_ids = hf_ids(hf_tokenizer, holder, "a photo of myemb, blurry")
    added = hf_tokenizer.convert_tokens_to_ids(["myemb", "myemb_1", "myemb_2"])
    assert [i for i in want_ids if i in added] == added  # diffusers put the three vectors there

    folders = EmbeddingFolders.of([tmp_path / "emb"])
    found = TowerEmbeddings(folders, "clip_l", 32)
    for prompt in (
        "a photo of embedding:myemb, blurry",
        "a photo of embedding:myemb.pt, blurry",
        "a photo of MyEmb, blurry",
    ):  # fmt: skip  (ComfyUI's two spellings, A1111's bare name)
        t = tokenize_weighted(prompt, tok.encode, ChunkSpec.clip(pad_with_end=True), embeddings=found)
        (window,) = t.chunks
        assert [tk.id if tk.vector is None else added[0] for tk in window if tk.vector is None] == [
            i for i in want_ids if i not in added
        ]
        placed = [j for j, tk in enumerate(window) if tk.vector is not None]
        assert placed == [want_ids.index(i) for i in added]
        assert t.used_embeddings[0][1] == str(tmp_path / "emb" / "myemb.pt")

        cond = PromptEncoder("sd1", TextEncoders(clip_l=ours), clip_tokenizer=tok, embeddings=folders).encode(
            prompt
        )
        close(cond.context, hf_hidden(ref, [want_ids]))
        assert cond.missing_embeddings == () and cond.notes == ()


def test_weighted_embedding_follows_comfyuis_rule(
    tmp_path: Path, tok: ClipTokenizer, hf_tokenizer: Any
) -> None:
    """``(embedding:name:1.2)``: each of its positions becomes (z - z_empty) * 1.2 + z_empty."""
    ours, ref = tiny_pair(32, projection=False, seed=12)
    vectors = torch.randn(2, 32, generator=torch.Generator().manual_seed(1))
    save_file({"emb_params": vectors}, str(tmp_path / "zqtwo.safetensors"))  # A1111's safetensors layout
    holder = _Holder()
    holder.load_textual_inversion(str(tmp_path / "zqtwo.safetensors"), token="zqtwo", tokenizer=hf_tokenizer,
                                  text_encoder=ref)  # fmt: skip
    ids = hf_ids(hf_tokenizer, holder, "cat zqtwo")
    empty = [49406, 49407] + [49407] * 75
    z, z_empty = hf_hidden(ref, [ids, empty]).unbind(0)
    weighted = [ids.index(i) for i in hf_tokenizer.convert_tokens_to_ids(["zqtwo", "zqtwo_1"])]
    want = z.clone()
    want[weighted] = (z[weighted] - z_empty[weighted]) * 1.2 + z_empty[weighted]

    folders = EmbeddingFolders.of([tmp_path])
    cond = PromptEncoder("sd1", TextEncoders(clip_l=ours), clip_tokenizer=tok, embeddings=folders).encode(
        "cat (embedding:zqtwo:1.2)"
    )
    close(cond.context[0], want)


def test_sdxl_pair_gives_each_tower_its_vectors(
    tmp_path: Path, tok: ClipTokenizer, hf_tokenizer: Any
) -> None:
    l_ours, l_ref = tiny_pair(32, projection=False, seed=13)
    g_ours, g_ref = tiny_pair(48, projection=True, seed=14)
    gen = torch.Generator().manual_seed(2)
    pair = {"clip_l": torch.randn(2, 32, generator=gen), "clip_g": torch.randn(2, 48, generator=gen)}
    save_file(pair, str(tmp_path / "xlemb.safetensors"))
    folders = EmbeddingFolders.of([tmp_path])
    cond = PromptEncoder(
        "sdxl", TextEncoders(clip_l=l_ours, clip_g=g_ours), clip_tokenizer=tok, embeddings=folders
    ).encode("embedding:xlemb castle")
    halves = []
    for key, ref, pad in (("clip_l", l_ref, "<|endoftext|>"), ("clip_g", g_ref, "!")):
        tokenizer = transformers.CLIPTokenizer.from_pretrained(hf_tokenizer.name_or_path, pad_token=pad)
        holder = _Holder()
        holder.load_textual_inversion(pair[key], token="xlemb", tokenizer=tokenizer, text_encoder=ref)
        halves.append(hf_hidden(ref, [hf_ids(tokenizer, holder, "xlemb castle")], layer=-2))
    close(cond.context, torch.cat(halves, dim=-1))


def test_an_embedding_of_another_width_is_left_out_with_a_note(tmp_path: Path, tok: ClipTokenizer) -> None:
    ours, _ = tiny_pair(48, projection=True, seed=15)
    write_a1111_pt(tmp_path / "sd1only.pt", torch.ones(4, 32))
    folders = EmbeddingFolders.of([tmp_path])
    enc = PromptEncoder("sd2", TextEncoders(clip_h=ours), clip_tokenizer=tok, embeddings=folders)
    cond = enc.encode("a photo of embedding:sd1only, blurry")
    plain = enc.encode("a photo of, blurry")
    assert torch.equal(cond.context, plain.context)  # ComfyUI: left out, the window padded at its end
    (note,) = cond.notes
    assert "sd1only" in note and "32 wide" in note and "48 wide" in note


def test_missing_name_is_reported_and_the_rest_kept(tmp_path: Path, tok: ClipTokenizer) -> None:
    ours, _ = tiny_pair(32, projection=False, seed=16)
    folders = EmbeddingFolders.of([tmp_path])
    enc = PromptEncoder("sd1", TextEncoders(clip_l=ours), clip_tokenizer=tok, embeddings=folders)
    cond = enc.encode("cat embedding:nowhere, smiling")
    assert cond.missing_embeddings == ("nowhere",)
    assert torch.equal(cond.context, enc.encode("cat, smiling").context)


def test_bare_names_are_whole_words_only(tmp_path: Path, tok: ClipTokenizer) -> None:
    write_a1111_pt(tmp_path / "EasyNeg.pt", torch.ones(2, 32))
    found = TowerEmbeddings(EmbeddingFolders.of([tmp_path]), "clip_l", 32)
    spec = ChunkSpec.clip(pad_with_end=True)
    for prompt, uses in (("blurry, easyneg", True), ("(EasyNeg:0.8) low", True), ("easynegative", False),
                         ("my-easyneg", False), ("easyneg_v2", False)):  # fmt: skip
        t = tokenize_weighted(prompt, tok.encode, spec, embeddings=found)
        assert t.has_vectors is uses, prompt


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("ran code from an embedding",))


def test_a_pickle_that_would_run_code_is_refused_in_words(tmp_path: Path, tok: ClipTokenizer) -> None:
    with open(tmp_path / "evil.pt", "wb") as fh:
        pickle.dump({"string_to_param": {"*": _Payload()}}, fh)
    found = TowerEmbeddings(EmbeddingFolders.of([tmp_path]), "clip_l", 32)
    with pytest.raises(LoadoutError) as err:
        tokenize_weighted("embedding:evil", tok.encode, ChunkSpec.clip(pad_with_end=True), embeddings=found)
    assert "evil" in err.value.message


def test_read_embedding_refuses_a_file_that_is_not_one(tmp_path: Path) -> None:
    save_file(
        {"a": torch.ones(3), "b": torch.ones(3), "c": torch.ones(2, 2)}, str(tmp_path / "x.safetensors")
    )
    with pytest.raises(LoadoutError, match="not a textual-inversion embedding"):
        read_embedding(tmp_path / "x.safetensors")


def test_names_stay_inside_the_folder(tmp_path: Path) -> None:
    (tmp_path / "emb" / "sub").mkdir(parents=True)
    write_a1111_pt(tmp_path / "outside.pt", torch.ones(1, 32))
    write_a1111_pt(tmp_path / "emb" / "sub" / "inner.pt", torch.ones(1, 32))
    folders = EmbeddingFolders.of([tmp_path / "emb"])
    assert folders.find("../outside") is None
    assert folders.find("sub/inner") == tmp_path / "emb" / "sub" / "inner.pt"
    assert folders.path_for_bare("INNER") == tmp_path / "emb" / "sub" / "inner.pt"


def test_a_file_added_later_is_seen_once_the_key_is_taken(tmp_path: Path) -> None:
    """The pipeline takes ``key`` for every prompt's cache key: a folder changed since lists again."""
    folders = EmbeddingFolders.of([tmp_path])
    before = folders.key
    assert folders.path_for_bare("later") is None
    write_a1111_pt(tmp_path / "later.pt", torch.ones(1, 32))
    os.utime(tmp_path, ns=(1, 1))  # a coarse-clock filesystem may keep the folder's time
    assert folders.key != before
    assert folders.path_for_bare("later") == tmp_path / "later.pt"


def test_a_t5_prompt_keeps_a_bare_name_as_text_and_leaves_embedding_names_out(
    tmp_path: Path, tok: ClipTokenizer
) -> None:
    """T5 takes no vectors: ``embedding:NAME`` is left out (the sequence padded at its end, as
    ComfyUI's T5 tokenizer does) with a note; a bare word stays the word."""
    write_a1111_pt(tmp_path / "EasyNeg.pt", torch.ones(2, 32))
    t5 = TowerEmbeddings(EmbeddingFolders.of([tmp_path]), "t5xxl", None)
    spec = ChunkSpec.t5(min_length=4)
    bare = tokenize_weighted("cat easyneg", tok.encode, spec, embeddings=t5, tower="T5")
    assert bare.ids() == tokenize_weighted("cat easyneg", tok.encode, spec).ids() and not bare.notes
    named = tokenize_weighted("cat embedding:EasyNeg", tok.encode, spec, embeddings=t5, tower="T5")
    assert named.ids() == [[*tok.encode("cat"), 1, 0, 0]]  # the 2 vectors' places padded at the end
    assert named.notes == ("embedding 'EasyNeg' was left out of the T5 prompt (it takes no embeddings)",)
