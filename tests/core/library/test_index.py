"""LibraryIndex.scan on real folders: listing first, live fill-in, progress, interrupt, bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import InterruptedByUser
from core.library import InspectCache, LibraryIndex, ModelRoot, ScanProgress, roots_for
from core.library.entry import Entry
from tests.core.library.conftest import CountingInspector, broken_file, make_a1111, make_comfyui, tiny_lora
from tests.fixtures.st_files import write_sparse


def _scan(index: LibraryIndex, **kwargs: object) -> list[Entry]:
    return list(index.scan(**kwargs))  # type: ignore[arg-type]


def _by_name(index: LibraryIndex) -> dict[str, Entry]:
    return {e.name: e for e in index.entries()}


def _stop_after(n: int) -> object:
    calls = {"n": 0}

    def check() -> None:
        calls["n"] += 1
        if calls["n"] > n:
            raise InterruptedByUser("scan stopped", why="you pressed stop")

    return check


def test_comfyui_a1111_and_extra_paths_indexed_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    comfy = make_comfyui(tmp_path)
    a1111 = make_a1111(tmp_path)
    shared = tmp_path / "shared"
    tiny_lora(shared / "Lora" / "shared_style.safetensors", "sdxl")
    monkeypatch.setenv("SHARED_MODELS", str(shared))
    (comfy / "extra_model_paths.yaml").write_text(
        "shared:\n  base_path: $SHARED_MODELS\n  loras: |\n    Lora\n    LyCORIS\n"
    )
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    index = LibraryIndex(roots_for([comfy, a1111]))
    _scan(index)
    got = {e.name: (e.status, e.kind, e.family, e.origin.split(":")[0]) for e in index.entries()}
    assert got == {
        "flux1-dev-unet.safetensors": ("ok", "diffusion_model", "flux-dev", "comfyui"),
        "v1-5-pruned-emaonly.safetensors": ("ok", "checkpoint", "sd1", "comfyui"),
        "Blue_Cat_v2.safetensors": ("ok", "lora", "sd1", "comfyui"),
        "ae.safetensors": ("ok", "vae", "vae-sd", "comfyui"),
        "clip_l.safetensors": ("ok", "text_encoder", "clip-l", "comfyui"),
        "shared_style.safetensors": ("ok", "lora", "sdxl", "extra_model_paths.yaml"),
        "sdxl_base.safetensors": ("ok", "checkpoint", "sdxl", "a1111"),
        "detail.safetensors": ("ok", "lora", "sdxl", "a1111"),
        "old.safetensors": ("ok", "lora", "sd1", "a1111"),
    }
    entries = _by_name(index)
    lora = entries["Blue_Cat_v2.safetensors"]
    assert lora.folder == "styles" and lora.kind_hint == "loras"
    assert lora.trigger_words[0] == "blue cat"
    assert lora.preview == lora.path.with_name("Blue_Cat_v2.preview.png")
    assert lora.lora_text == "kohya lora, rank 4, 4 modules"
    assert lora.record is not None and lora.record["path"] == str(lora.path)
    ckpt = entries["v1-5-pruned-emaonly.safetensors"]
    assert ckpt.dtype == "fp16" and ckpt.params > 1_000_000_000  # sd1: 1.07 G params from shapes alone
    assert {c.role for c in ckpt.components} == {"diffusion_model", "vae", "text_encoder"}
    # A diffusion-only Flux file in checkpoints/ is the classic "Could not detect model type".
    assert any("diffusion_models" in w for w in entries["flux1-dev-unet.safetensors"].warnings)
    assert not any("folder" in w for w in lora.warnings)
    assert any("LyCORIS" in p and "cannot be listed" in p for p in index.problems)  # missing: reported
    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before and set(tmp_path.rglob("*")) >= set(before)  # read in place, nothing written


def test_300_files_are_listed_at_once_then_fill_in_live_in_order(tmp_path: Path) -> None:
    folder = tmp_path / "loras"
    for i in range(300):
        tiny_lora(folder / f"lora_{i:03d}.safetensors")
    events: list[ScanProgress] = []
    index = LibraryIndex([ModelRoot(folder, "loras", "folder")])
    yielded: list[tuple[str, str]] = []
    seen_when_first_ok = -1
    for entry in index.scan(progress=events.append):
        yielded.append((entry.name, entry.status))
        if entry.status == "ok" and seen_when_first_ok < 0:
            seen_when_first_ok = len(index)
    names = [f"lora_{i:03d}.safetensors" for i in range(300)]
    assert yielded[:300] == [(n, "pending") for n in names]  # the whole folder, before any read
    assert yielded[300:] == [(n, "ok") for n in names]  # then each file as it is read, in order
    assert seen_when_first_ok == 300
    inspecting = [e for e in events if e.phase == "inspecting"]
    assert [(e.done, e.total) for e in inspecting] == [(i, 300) for i in range(301)]
    assert [e.current.name for e in inspecting[1:] if e.current] == names
    assert events[0].phase == "listing" and events[-1] == ScanProgress("done", 300, 300)
    assert all(e.status == "ok" and e.family == "sd1" for e in index.entries())


def test_pending_entries_group_by_their_folder(tmp_path: Path) -> None:
    install = make_comfyui(tmp_path)
    index = LibraryIndex(roots_for([install]))
    first = next(iter(index.scan()))
    assert first.status == "pending" and first.kind == "unknown" and first.group_kind == "checkpoint"


@pytest.mark.timeout(20)  # a loop followed forever would hang here
def test_symlink_loops_broken_links_and_broken_files(tmp_path: Path) -> None:
    root = tmp_path / "models"
    tiny_lora(root / "a" / "b" / "deep.safetensors")
    (root / "a" / "b" / "loop").symlink_to("..")  # back to a: would recurse forever
    (root / "a" / "b" / "self").symlink_to("self")  # a link to itself
    (root / "me.safetensors").symlink_to("me.safetensors")  # ELOOP on stat
    (root / "gone.safetensors").symlink_to("nowhere.safetensors")
    (root / "same.safetensors").symlink_to(root / "a" / "b" / "deep.safetensors")  # once only
    broken_file(root / "download.safetensors")
    (root / "truncated.ckpt").write_bytes(b"PK\x03\x04" + b"\x00" * 10)
    (root / "notes.txt").write_text("not a model")
    index = LibraryIndex([ModelRoot(root, None, "folder")])
    _scan(index)
    entries = _by_name(index)
    assert sorted(entries) == [  # deep.safetensors is same.safetensors, found first (files before folders)
        "download.safetensors",
        "gone.safetensors",
        "me.safetensors",
        "same.safetensors",
        "truncated.ckpt",
    ]
    assert entries["same.safetensors"].status == "ok" and entries["same.safetensors"].kind == "lora"
    for name in ("download.safetensors", "gone.safetensors", "me.safetensors", "truncated.ckpt"):
        assert entries[name].status == "error" and entries[name].error, name
    assert "web page" in (entries["download.safetensors"].error or "")
    assert "nowhere.safetensors, which does not exist" in (entries["gone.safetensors"].error or "")
    assert any("loop" in p and "already listed" in p for p in index.problems)


def test_unreadable_and_missing_folders_are_skipped_with_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "models"
    tiny_lora(root / "ok" / "fine.safetensors")
    tiny_lora(root / "locked" / "secret.safetensors")
    real_scandir = os.scandir

    def scandir(path: object) -> object:
        if Path(str(path)).name == "locked":  # what a folder without read permission does
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    index = LibraryIndex([ModelRoot(root, None, "folder"), ModelRoot(tmp_path / "nope", "vae", "folder")])
    _scan(index)
    assert [e.name for e in index.entries()] == ["fine.safetensors"]
    assert any("locked cannot be listed: Permission denied" in p for p in index.problems)
    assert any("nope" in p and "cannot be listed" in p for p in index.problems)


def test_interrupt_mid_scan_leaves_a_consistent_partial_index(
    tmp_path: Path, counting: CountingInspector
) -> None:
    folder = tmp_path / "loras"
    for i in range(10):
        tiny_lora(folder / f"l{i}.safetensors")
    cache_path = tmp_path / "cache" / "library.sqlite"
    index = LibraryIndex([ModelRoot(folder, "loras", "folder")], InspectCache(cache_path), inspect=counting)
    yielded: list[Entry] = []
    # One check for the folder, then one before each file: stop before the 5th file is read.
    with pytest.raises(InterruptedByUser):
        for entry in index.scan(check=_stop_after(1 + 4)):  # type: ignore[arg-type]
            yielded.append(entry)
    statuses = [e.status for e in index.entries()]
    assert statuses == ["ok"] * 4 + ["pending"] * 6
    assert counting.total == 4
    assert all(index.get(e.path) == e for e in yielded[-4:])
    # What was read is in the cache on disk: a new run reads only the other six.
    again = CountingInspector()
    index2 = LibraryIndex([ModelRoot(folder, "loras", "folder")], InspectCache(cache_path), inspect=again)
    _scan(index2)
    assert again.total == 6 and sorted(again.reads) == [f"l{i}.safetensors" for i in range(4, 10)]
    assert all(e.status == "ok" for e in index2.entries())


def test_interrupt_while_listing_keeps_the_previous_entries(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for sub in ("a", "b", "c"):
        tiny_lora(root / sub / f"{sub}.safetensors")
    index = LibraryIndex([ModelRoot(root, None, "folder")])
    _scan(index)
    with pytest.raises(InterruptedByUser):
        _scan(index, check=_stop_after(2))
    assert [e.name for e in index.entries()] == ["a.safetensors", "b.safetensors", "c.safetensors"]
    assert all(e.status == "ok" for e in index.entries())


def test_rescan_drops_removed_files_and_rereads_changed_ones(
    tmp_path: Path, counting: CountingInspector
) -> None:
    folder = tmp_path / "loras"
    for name in ("a", "b", "c"):
        tiny_lora(folder / f"{name}.safetensors")
    index = LibraryIndex([ModelRoot(folder, "loras", "folder")], InspectCache(None), inspect=counting)
    _scan(index)
    (folder / "b.safetensors").unlink()
    tiny_lora(folder / "c.safetensors", "sdxl")  # rewritten: another size
    tiny_lora(folder / "d.safetensors")
    events: list[ScanProgress] = []
    _scan(index, progress=events.append)
    assert [(e.name, e.family) for e in index.entries()] == [
        ("a.safetensors", "sd1"),
        ("c.safetensors", "sdxl"),
        ("d.safetensors", "sd1"),
    ]
    assert counting.reads == {"a.safetensors": 1, "b.safetensors": 1, "c.safetensors": 2, "d.safetensors": 1}
    first_inspecting = next(e for e in events if e.phase == "inspecting")
    assert first_inspecting.removed == (folder / "b.safetensors",)
    assert (first_inspecting.total, first_inspecting.cached) == (2, 1)


def test_a_detector_crash_is_an_error_row_not_a_crash(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    tiny_lora(folder / "a.safetensors")
    tiny_lora(folder / "b.safetensors")

    def explode(path: Path) -> object:
        if path.name == "a.safetensors":
            raise KeyError("input_blocks.0.0.weight")
        from core.inspect import inspect_file

        return inspect_file(path)

    index = LibraryIndex([ModelRoot(folder, None, "folder")], inspect=explode)  # type: ignore[arg-type]
    _scan(index)
    a, b = index.entries()
    assert a.status == "error" and a.error_code == "inspect_failed" and "KeyError" in (a.error or "")
    assert b.status == "ok"


def test_refresh_rereads_one_fixed_file(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    bad = broken_file(folder / "fixme.safetensors")
    index = LibraryIndex([ModelRoot(folder, "loras", "folder")], InspectCache(None))
    _scan(index)
    assert index.entries()[0].status == "error"
    tiny_lora(bad)
    fixed = index.refresh(bad)
    assert fixed is not None and fixed.status == "ok" and fixed.kind == "lora" and fixed.folder == ""
    assert index.get(bad) == fixed
    bad.unlink()
    gone = index.refresh(bad)
    assert gone is not None and gone.status == "error" and gone.error_code == "not_found"
    assert index.refresh(folder / "never-indexed.safetensors") is None


def test_a_model_file_given_as_a_root_and_nested_roots(tmp_path: Path) -> None:
    models = tmp_path / "models"
    single = tiny_lora(tmp_path / "one.safetensors")
    tiny_lora(models / "loras" / "x.safetensors")
    write_sparse(models / "top.safetensors", {"w": (4, 4)})
    roots = [
        ModelRoot(models, None, "folder"),
        ModelRoot(models / "loras", "loras", "folder"),
        ModelRoot(single, None, "folder"),
    ]
    index = LibraryIndex(roots)
    _scan(index)
    got = {e.name: (e.root.name, e.folder, e.kind_hint) for e in index.entries()}
    # x.safetensors belongs to the more specific root (its hint), once.
    assert got == {
        "top.safetensors": ("models", "", None),
        "x.safetensors": ("loras", "", "loras"),
        "one.safetensors": ("one.safetensors", "", None),
    }
