"""InspectCache: a file is read once until it changes; a damaged cache is rebuilt, never fatal."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from core.library import InspectCache, LibraryIndex, ModelRoot
from core.library.cache import SCHEMA_VERSION, cacheable
from core.library.entry import METADATA_VALUE_CAP, OMITTED
from core.version import DETECTION_REVISION, cache_version, engine_version
from tests.core.library.conftest import CountingInspector, broken_file, tiny_lora


def _library(tmp_path: Path, n: int = 3) -> Path:
    folder = tmp_path / "loras"
    for i in range(n):
        tiny_lora(folder / f"l{i}.safetensors")
    return folder


def _run(folder: Path, cache: InspectCache, counting: CountingInspector) -> LibraryIndex:
    index = LibraryIndex([ModelRoot(folder, "loras", "folder")], cache, inspect=counting)
    list(index.scan())
    return index


def test_a_cached_file_is_not_read_again_across_runs(tmp_path: Path) -> None:
    folder = _library(tmp_path)
    db = tmp_path / "cache.sqlite"
    first = CountingInspector()
    with InspectCache(db) as cache:
        a = _run(folder, cache, first)
    assert first.total == 3
    second = CountingInspector()
    with InspectCache(db) as cache:  # a new run of the app: a new index, the same cache file
        b = _run(folder, cache, second)
        assert len(cache) == 3 and cache.warnings == []
    assert second.total == 0
    assert [(e.name, e.status, e.kind, e.family, e.lora) for e in b.entries()] == [
        (e.name, e.status, e.kind, e.family, e.lora) for e in a.entries()
    ]


def test_changed_mtime_size_or_sidecar_reads_again(tmp_path: Path) -> None:
    folder = _library(tmp_path)
    db = tmp_path / "cache.sqlite"
    with InspectCache(db) as cache:
        _run(folder, cache, CountingInspector())
    st = (folder / "l0.safetensors").stat()
    os.utime(folder / "l0.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    tiny_lora(folder / "l1.safetensors", "sdxl")  # another size
    (folder / "l2.civitai.info").write_text(json.dumps({"trainedWords": ["glowing eyes"]}))
    counting = CountingInspector()
    with InspectCache(db) as cache:
        index = _run(folder, cache, counting)
    assert counting.reads == {"l0.safetensors": 1, "l1.safetensors": 1, "l2.safetensors": 1}
    entries = {e.name: e for e in index.entries()}
    assert entries["l1.safetensors"].family == "sdxl"
    assert entries["l2.safetensors"].trigger_words == ("glowing eyes",)


def test_a_new_preview_shows_without_reading_the_model(tmp_path: Path) -> None:
    folder = _library(tmp_path, 1)
    db = tmp_path / "cache.sqlite"
    with InspectCache(db) as cache:
        _run(folder, cache, CountingInspector())
    (folder / "l0.webp").write_bytes(b"RIFF....WEBP")
    counting = CountingInspector()
    with InspectCache(db) as cache:
        index = _run(folder, cache, counting)
    (entry,) = index.entries()
    assert counting.total == 0 and entry.preview == folder / "l0.webp"
    assert entry.record is not None and entry.record["metadata"]["loadout.preview"] == str(folder / "l0.webp")


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(os.urandom(4096)),  # not a database at all
        lambda p: p.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200),  # a damaged one
        lambda p: _sql(p, f"PRAGMA user_version = {SCHEMA_VERSION + 41}"),  # from another version
    ],
    ids=["garbage", "damaged", "schema"],
)
def test_an_unusable_cache_is_rebuilt_with_a_warning(tmp_path: Path, damage) -> None:
    folder = _library(tmp_path)
    db = tmp_path / "cache.sqlite"
    with InspectCache(db) as cache:
        _run(folder, cache, CountingInspector())
    damage(db)
    counting = CountingInspector()
    with InspectCache(db) as cache:
        assert len(cache.warnings) == 1 and "rebuilt" in cache.warnings[0]
        index = _run(folder, cache, counting)
    assert counting.total == 3 and all(e.status == "ok" for e in index.entries())
    assert (tmp_path / "cache.sqlite.corrupt").exists()  # set aside, not deleted
    assert any("rebuilt" in p for p in index.problems)
    list(index.scan())  # its cache is closed now: the scan still works (reading the files)
    assert index.problems == [] and all(e.status == "ok" for e in index.entries())  # reported once
    again = CountingInspector()
    with InspectCache(db) as cache:  # the rebuilt file works
        _run(folder, cache, again)
        assert cache.warnings == []
    assert again.total == 0


def _sql(path: Path, statement: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


def test_another_engine_version_empties_the_cache(tmp_path: Path) -> None:
    folder = _library(tmp_path)
    db = tmp_path / "cache.sqlite"
    with InspectCache(db, engine_version="0.1.0") as cache:
        _run(folder, cache, CountingInspector())
    counting = CountingInspector()
    with InspectCache(db, engine_version="0.2.0") as cache:
        assert "0.1.0" in cache.warnings[0]
        _run(folder, cache, counting)
    assert counting.total == 3


def test_a_new_detection_revision_reads_every_file_again(tmp_path: Path) -> None:
    """Records cached before detection learned something new (a LoRA's trained scale) are not
    served to the same package version's newer detection."""
    folder = _library(tmp_path)
    db = tmp_path / "cache.sqlite"
    before = f"{engine_version()}+detect{DETECTION_REVISION - 1}"
    with InspectCache(db, engine_version=before) as cache:
        _run(folder, cache, CountingInspector())
    counting = CountingInspector()
    assert cache_version() != before and str(DETECTION_REVISION) in cache_version()
    with InspectCache(db, engine_version=cache_version()) as cache:
        _run(folder, cache, counting)
    assert counting.total == 3


def test_damaged_rows_are_read_again(tmp_path: Path) -> None:
    folder = _library(tmp_path, 2)
    db = tmp_path / "cache.sqlite"
    with InspectCache(db) as cache:
        _run(folder, cache, CountingInspector())
    _sql(db, "UPDATE records SET record = '{not json' WHERE path LIKE '%l0.safetensors'")
    _sql(db, """UPDATE records SET record = '{"kind": "lora"}' WHERE path LIKE '%l1.safetensors'""")
    counting = CountingInspector()
    with InspectCache(db) as cache:
        index = _run(folder, cache, counting)
    assert counting.total == 2 and all(e.status == "ok" for e in index.entries())


def test_a_cache_that_cannot_be_written_falls_back_to_memory(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    folder = _library(tmp_path, 2)
    cache = InspectCache(tmp_path / "a-file" / "cache.sqlite")  # parent is a file: cannot be created
    assert cache.path is None and "kept in memory" in cache.warnings[0]
    counting = CountingInspector()
    _run(folder, cache, counting)
    _run(folder, cache, counting)
    assert counting.total == 2


def test_broken_files_are_cached_transient_errors_are_not(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    broken_file(folder / "bad.safetensors")
    db = tmp_path / "cache.sqlite"
    with InspectCache(db) as cache:
        _run(folder, cache, CountingInspector())
        assert len(cache) == 1
    counting = CountingInspector()
    with InspectCache(db) as cache:
        index = _run(folder, cache, counting)
    assert counting.total == 0 and index.entries()[0].error_code == "not_a_model"
    assert not cacheable({"error": {"code": "unreadable", "message": "Permission denied"}})
    assert cacheable({"error": None}) and cacheable({"error": {"code": "truncated", "message": ""}})


def test_long_metadata_is_left_out_of_stored_records(tmp_path: Path) -> None:
    tags = {f"tag{i}": i for i in range(2000)}
    big = json.dumps({"5_cat": {"a cat": 9999, **tags}})
    assert len(big) > METADATA_VALUE_CAP
    folder = tmp_path / "m"
    tiny_lora(folder / "big.safetensors", metadata={"ss_tag_frequency": big, "ss_network_dim": "4"})
    db = tmp_path / "cache.sqlite"
    with InspectCache(db) as cache:
        _run(folder, cache, CountingInspector())
    assert db.stat().st_size < 64 * 1024
    with InspectCache(db) as cache:
        (entry,) = _run(folder, cache, CountingInspector()).entries()
    assert entry.record is not None
    meta = entry.record["metadata"]
    assert meta[OMITTED] == ["ss_tag_frequency"] and meta["ss_network_dim"] == "4"
    assert entry.trigger_words[0] == "a cat"  # derived from it before it was left out


def test_forget_missing_and_batched_commits(tmp_path: Path) -> None:
    folder = _library(tmp_path, 3)
    db = tmp_path / "cache.sqlite"
    cache = InspectCache(db)
    _run(folder, cache, CountingInspector())  # scan() flushes at its end
    other = InspectCache(db)  # a second connection sees what was committed
    assert len(other) == 3
    other.close()
    (folder / "l1.safetensors").unlink()
    assert cache.forget_missing() == 1 and len(cache) == 2
    cache.close()
