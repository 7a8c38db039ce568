"""Duplicates (same SHA-256; same size while unhashed), disk usage per folder and kind, the
"fits the loaded model" LoRA filter and sorting by last use."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from core.detect.catalog import REGISTRY, lora_fits
from core.library import Entry, InspectCache, LibraryIndex, ModelRoot
from core.library.query import disk_usage, filter_entries, find_duplicates, sort_entries, wasted_bytes
from core.patching.lora_stack import compatible
from core.session.library import Library

ROOT = Path("/models")


def _e(name: str, size: int, sha: str | None = None, *, folder: str = "loras", kind: str = "lora",
       family: str | None = "sd1", file_id: tuple[int, int] | None = None,
       last_used: float | None = None) -> Entry:  # fmt: skip
    return Entry(
        path=ROOT / folder / name, origin="folder", root=ROOT, folder=folder, kind_hint=None, size=size,
        mtime_ns=0, status="ok", kind=kind, family=family, sha256=sha, file_id=file_id, last_used=last_used,
    )  # fmt: skip


def test_same_hash_under_other_names_is_a_duplicate_with_the_bytes_it_wastes() -> None:
    a, b = _e("a.safetensors", 100, "h1"), _e("copy of a.safetensors", 100, "h1", folder="old")
    c = _e("x", 100, "h2")
    three = _e("third.safetensors", 100, "h1", folder="misc")
    dups = find_duplicates([a, b, c, three])
    assert set(dups) == {str(a.path), str(b.path), str(three.path)}
    assert dups[str(a.path)].confirmed and dups[str(a.path)].others == (b.path, three.path)
    assert dups[str(a.path)].wasted == 200  # three copies: two too many
    assert wasted_bytes(dups, [a, b, c, three]) == 200


def test_same_size_is_only_a_possible_duplicate_until_hashed() -> None:
    a, b = _e("a", 100), _e("b", 100, "h1")
    dups = find_duplicates([a, b, _e("c", 7)])
    assert set(dups) == {str(a.path), str(b.path)}
    assert not dups[str(a.path)].confirmed and dups[str(a.path)].wasted == 0
    # once both are hashed the size says nothing more
    assert find_duplicates([_e("a", 100, "h2"), b]) == {}


def test_hard_links_to_one_file_are_not_duplicates_and_waste_nothing() -> None:
    a = _e("a", 100, "h", file_id=(1, 5))
    b = _e("b", 100, "h", folder="linked", file_id=(1, 5))
    assert find_duplicates([a, b]) == {}
    c = _e("c", 100, "h", folder="copy", file_id=(1, 9))
    dups = find_duplicates([a, b, c])
    assert dups[str(c.path)].wasted == 100 and wasted_bytes(dups, [a, b, c]) == 100


def test_duplicates_found_on_real_files_through_the_index(tmp_path: Path) -> None:
    data = os.urandom(3000)
    (tmp_path / "loras" / "old").mkdir(parents=True)
    (tmp_path / "loras" / "style.safetensors").write_bytes(data)
    (tmp_path / "loras" / "old" / "style (1).safetensors").write_bytes(data)
    os.link(tmp_path / "loras" / "style.safetensors", tmp_path / "loras" / "old" / "linked.safetensors")
    lib = Library(InspectCache(None))
    list(lib.scan([str(tmp_path / "loras")], lambda p: None, lambda: None))
    assert lib.index is not None
    before = find_duplicates(lib.index.entries())
    names = {"style.safetensors", "style (1).safetensors", "linked.safetensors"}
    assert {Path(p).name for p in before} == names
    assert not any(d.confirmed for d in before.values())
    for job in lib.hash_jobs():
        lib.hashed(job.path, lib.hashes.digest(job.path))
    after = find_duplicates(lib.index.entries())
    assert all(d.confirmed for d in after.values()) and len(after) == 3
    assert wasted_bytes(after, lib.index.entries()) == 3000  # the link costs nothing
    assert {e.sha256 for e in lib.index.entries()} == {hashlib.sha256(data).hexdigest()}
    usage = disk_usage(lib.index.entries(), "root")
    assert usage == {str(tmp_path / "loras"): usage[str(tmp_path / "loras")]}
    assert usage[str(tmp_path / "loras")].bytes == 6000  # two files on disk (three names)


def test_disk_usage_per_root_folder_and_kind() -> None:
    entries = [
        _e("a", 10, folder="loras"),
        _e("b", 20, folder="loras/x"),
        _e("c", 300, folder="checkpoints", kind="checkpoint"),
        _e("d", 10, folder="loras/x", file_id=(1, 1)),
        _e("d-link", 10, folder="loras/x", file_id=(1, 1)),
    ]
    assert disk_usage(entries, "root")[str(ROOT)].bytes == 340
    by_folder = disk_usage(entries, "folder")
    assert by_folder[str(ROOT / "loras/x")].files == 2 and by_folder[str(ROOT / "loras/x")].bytes == 30
    by_kind = disk_usage(entries, "kind")
    assert by_kind["lora"].bytes == 40 and by_kind["checkpoint"].bytes == 300


def test_lora_fit_comes_from_the_family_records() -> None:
    assert lora_fits("sd1", "sd1") and not lora_fits("sd1", "sdxl") and not lora_fits("sdxl", "sd1")
    assert lora_fits("sdxl", "ssd-1b") and lora_fits("flux-dev", "chroma") and lora_fits(None, "sdxl")
    assert not lora_fits("sdxl", "sdxl-refiner")
    for fam in REGISTRY:
        for other in REGISTRY:
            assert compatible(fam.id, other.id) == lora_fits(fam.id, other.id)  # one rule, two callers


def test_the_fits_filter_hides_only_loras_for_other_models() -> None:
    sd1, sdxl, unknown = _e("sd1", 1), _e("xl", 2, family="sdxl"), _e("what", 3, family=None)
    ckpt = _e("base", 4, kind="checkpoint", family="sd1", folder="checkpoints")
    assert filter_entries([sd1, sdxl, unknown, ckpt], fits="sdxl") == [sdxl, unknown, ckpt]
    assert filter_entries([sd1, sdxl, unknown, ckpt], fits="sd1") == [sd1, unknown, ckpt]
    assert filter_entries([sd1, sdxl], fits="segmind-vega") == [sdxl]


@pytest.mark.parametrize("descending", [False, True])
def test_sort_by_last_used_keeps_never_used_files_last(descending: bool) -> None:
    old, new, never = _e("old", 1, last_used=100.0), _e("new", 1, last_used=200.0), _e("never", 1)
    got = [e.name for e in sort_entries([never, old, new], "last_used", descending=descending)]
    assert got == (["new", "old", "never"] if descending else ["old", "new", "never"])


def test_a_use_is_kept_in_the_cache_and_shown_after_a_rescan(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    f = folder / "a.safetensors"
    f.write_bytes(b"x" * 10)
    db = tmp_path / "c.sqlite"
    with InspectCache(db) as cache:
        lib = Library(cache)
        list(lib.scan([str(folder)], lambda p: None, lambda: None))
        (changed,) = lib.note_used([f])
        assert lib.note_used([tmp_path / "elsewhere.safetensors"]) == []  # not in the library
    with InspectCache(db) as cache:
        index = LibraryIndex([ModelRoot(folder, None, "folder")], cache)
        list(index.scan())
        assert index.entries()[0].last_used == changed.last_used


def _scan_hashes(folder: Path, db: Path) -> list[Entry]:
    with InspectCache(db) as cache:
        lib = Library(cache)
        list(lib.scan([str(folder)], lambda p: None, lambda: None))
        for job in lib.hash_jobs():
            lib.hashed(job.path, lib.hashes.digest(job.path))
        assert lib.index is not None
        return lib.index.entries()


@pytest.mark.parametrize("bogus", ["copied", "garbage"])
def test_a_bogus_hash_row_in_the_cache_makes_no_duplicates(tmp_path: Path, bogus: str) -> None:
    """Issue 35: a damaged or edited row of the cache's hash table (another file's hash, a value
    that is no SHA-256) must not show two different files as copies of each other."""
    import sqlite3

    folder = tmp_path / "loras"
    folder.mkdir()
    a, b = folder / "a.safetensors", folder / "b.safetensors"
    a.write_bytes(os.urandom(3000))
    b.write_bytes(os.urandom(2000))
    db = tmp_path / "c.sqlite"
    first = {e.path.name: e.sha256 for e in _scan_hashes(folder, db)}
    assert first == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)}
    with sqlite3.connect(db) as conn:  # b's row now holds a's hash, or a damaged value for both
        if bogus == "copied":
            conn.execute("UPDATE hashes SET sha256 = ? WHERE path = ?", (first["a.safetensors"], str(b)))
        else:
            conn.execute("UPDATE hashes SET sha256 = 'x', addnet = 'x'")
    entries = _scan_hashes(folder, db)
    assert find_duplicates(entries) == {} and wasted_bytes({}, entries) == 0
    if bogus == "garbage":  # the damaged rows were dropped and the files read again
        assert {e.path.name: e.sha256 for e in entries} == first
