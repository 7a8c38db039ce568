"""Search, filter, sort and group, on entries of a real scan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.library import (
    FolderKey,
    LibraryIndex,
    ModelRoot,
    filter_entries,
    group_by_folder,
    group_by_kind,
    roots_for,
    search,
    sort_entries,
)
from core.library.entry import Entry
from tests.core.library.conftest import broken_file, make_comfyui, tiny_lora


@pytest.fixture
def entries(tmp_path: Path) -> list[Entry]:
    install = make_comfyui(tmp_path)
    loras = install / "models" / "loras"
    tiny_lora(loras / "lora_v10.safetensors", "sdxl")
    tiny_lora(loras / "Lora_v2.safetensors", "sdxl", metadata={"modelspec.trigger_phrase": "Neon Glow, city"})
    broken_file(loras / "zz_broken.safetensors")
    for i, path in enumerate(sorted(install.rglob("*.safetensors"))):
        os.utime(path, ns=(0, (i + 1) * 10**9))  # distinct, known dates
    index = LibraryIndex(roots_for([install]))
    list(index.scan())
    return index.entries()


def _names(entries: list[Entry]) -> list[str]:
    return [e.name for e in entries]


def test_search_is_case_insensitive_on_name_family_and_trigger_words(entries: list[Entry]) -> None:
    assert _names(search(entries, "BLUE")) == ["Blue_Cat_v2.safetensors"]
    assert _names(search(entries, "blue cat")) == ["Blue_Cat_v2.safetensors"]  # every word
    assert _names(search(entries, '"neon glow"')) == ["Lora_v2.safetensors"]  # trigger phrase
    assert _names(search(entries, "sitting")) == ["Blue_Cat_v2.safetensors"]  # a trigger word only
    assert set(_names(search(entries, "SDXL"))) == {"lora_v10.safetensors", "Lora_v2.safetensors"}
    assert _names(search(entries, "flux-dev")) == ["flux1-dev-unet.safetensors"]
    assert search(entries, "  ") == entries and search(entries, "nothing-like-this") == []


def test_filter_by_kind_family_status_origin(entries: list[Entry]) -> None:
    assert set(_names(filter_entries(entries, kinds={"lora"}, families={"sdxl"}))) == {
        "lora_v10.safetensors",
        "Lora_v2.safetensors",
    }
    assert _names(filter_entries(entries, statuses={"error"})) == ["zz_broken.safetensors"]
    assert _names(filter_entries(entries, kinds={"text_encoder", "vae"})) == [
        "ae.safetensors",
        "clip_l.safetensors",
    ]
    assert filter_entries(entries, origins={"elsewhere"}) == []
    assert len(filter_entries(entries, families={None})) == 1  # the broken file has no family


def test_sort_by_name_date_size_family(entries: list[Entry]) -> None:
    loras = filter_entries(entries, kinds={"lora"}, statuses={"ok"})
    assert _names(sort_entries(loras)) == [
        "Blue_Cat_v2.safetensors",
        "Lora_v2.safetensors",
        "lora_v10.safetensors",
    ]
    assert _names(sort_entries(loras, "name", descending=True))[0] == "lora_v10.safetensors"
    by_date = sort_entries(entries, "date")
    assert [e.mtime_ns for e in by_date] == sorted(e.mtime_ns for e in entries)
    assert sort_entries(entries, "date", descending=True) == by_date[::-1]
    by_size = sort_entries(entries, "size", descending=True)
    assert (
        by_size[0].name == "v1-5-pruned-emaonly.safetensors" and by_size[-1].name == "zz_broken.safetensors"
    )
    fams = [e.family for e in sort_entries(entries, "family")]
    assert fams == [*sorted(fams[:-1]), None]  # unknown family last
    assert [e.family for e in sort_entries(entries, "family", descending=True)][-1] is None
    with pytest.raises(ValueError, match="cannot sort by"):
        sort_entries(entries, "colour")  # type: ignore[arg-type]


def test_group_by_folder_and_kind(entries: list[Entry]) -> None:
    folders = group_by_folder(entries)
    labels = [k.label.split("/models/")[1] for k in folders]
    assert labels == ["checkpoints", "loras", "loras/styles", "vae", "clip"]
    styles = next(k for k in folders if k.folder == "styles")
    assert isinstance(styles, FolderKey) and _names(folders[styles]) == ["Blue_Cat_v2.safetensors"]
    kinds = group_by_kind(entries)
    assert list(kinds) == ["checkpoint", "diffusion_model", "lora", "vae", "text_encoder", "unknown"]
    assert _names(kinds["unknown"]) == ["zz_broken.safetensors"]


def test_pending_entries_filter_and_group_by_their_folder(tmp_path: Path) -> None:
    tiny_lora(tmp_path / "loras" / "a.safetensors")
    index = LibraryIndex([ModelRoot(tmp_path / "loras", "loras", "folder")])
    pending = next(iter(index.scan()))
    assert pending.status == "pending"
    assert filter_entries([pending], kinds={"lora"}) == [pending]
    assert list(group_by_kind([pending])) == ["lora"]
