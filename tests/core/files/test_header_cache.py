"""Safetensors indexes remembered by structure: a hit returns exactly what a full read returns."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import LoadoutError
from core.files import header_cache
from core.files.model_file import TensorIndex, read_tensor_index
from core.files.safetensors import read_header

ENTRIES = {
    "a.weight": {"dtype": "F16", "shape": [4, 3], "data_offsets": [0, 24]},
    "a.bias": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]},
    "b": {"dtype": "BF16", "shape": [0], "data_offsets": [40, 40]},
}


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    header_cache.clear()
    yield
    header_cache.clear()


def _write(
    path: Path, metadata: object = None, *, first: bool = True, pad: int = 0, spare: int = 0, data: int = 40
) -> Path:
    """A file whose header text is laid out as asked: metadata first or last, padding, bytes
    of unused data after the last tensor."""
    parts = [f'"{k}":{json.dumps(v)}' for k, v in ENTRIES.items()]
    if metadata is not None:
        meta = f'"__metadata__":{json.dumps(metadata)}'
        parts = [meta, *parts] if first else [*parts, meta]
    raw = ("{" + ",".join(parts) + "}").encode() + b" " * pad
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(data + spare))
    return path


def _full(path: Path) -> TensorIndex:
    """What a read with no cache gives."""
    h = read_header(path)
    return TensorIndex(
        path, "safetensors", path.stat().st_size, h.tensors, dict(h.metadata), list(h.warnings)
    )


def _same(got: TensorIndex, want: TensorIndex) -> None:
    assert got.tensors == want.tensors
    assert list(got.tensors) == list(want.tensors)  # order too: the JSON lists keys in file order
    assert got.metadata == want.metadata
    assert got.warnings == want.warnings
    assert got.file_size == want.file_size


def test_files_that_differ_only_in_metadata_share_one_structure(tmp_path: Path) -> None:
    one = _write(tmp_path / "one.safetensors", {"title": "one"}, pad=3, spare=8)
    two = _write(tmp_path / "two.safetensors", {"title": "a longer } title {", "x": 'q"uote'}, pad=5, spare=8)
    first = read_tensor_index(one)
    _same(first, _full(one))
    assert first.structure is not None and header_cache.get(first.structure) is not None
    assert first.warnings == ["8 bytes of unused data after the last tensor"]
    second = read_tensor_index(two)  # longer metadata, other padding: the same entries, a hit
    assert second.structure == first.structure
    _same(second, _full(two))
    assert second.metadata == {"title": "a longer } title {", "x": 'q"uote'}
    # Laid out otherwise (metadata last, or none): another structure, read in full, still right.
    for name, meta, first_ in (("last", {"t": "x"}, False), ("none", None, True)):
        p = _write(tmp_path / f"{name}.safetensors", meta, first=first_, spare=8)
        got = read_tensor_index(p)
        assert got.structure not in (None, first.structure)
        _same(got, _full(p))


def test_the_data_area_size_is_part_of_the_structure(tmp_path: Path) -> None:
    tight = read_tensor_index(_write(tmp_path / "tight.safetensors", {"t": "1"}))
    loose_path = _write(tmp_path / "loose.safetensors", {"t": "1"}, spare=16)
    loose = read_tensor_index(loose_path)
    assert tight.structure != loose.structure
    assert tight.warnings == [] and loose.warnings == ["16 bytes of unused data after the last tensor"]
    _same(loose, _full(loose_path))
    short = _write(tmp_path / "short.safetensors", {"t": "1"}, data=30)  # truncated: same header text
    with pytest.raises(LoadoutError) as err:
        read_tensor_index(short)
    assert err.value.code == "truncated"


def test_non_string_metadata_goes_the_full_way_and_keeps_its_warning(tmp_path: Path) -> None:
    read_tensor_index(_write(tmp_path / "seen.safetensors", {"title": "x"}))
    odd = _write(tmp_path / "odd.safetensors", {"steps": 1200, "title": "y"})
    got = read_tensor_index(odd)
    _same(got, _full(odd))
    assert got.metadata["steps"] == "1200" and any("not a string" in w for w in got.warnings)
    assert got.structure is None  # not remembered: its warnings are about metadata


@pytest.mark.parametrize(
    "metadata",
    [
        {"note": 'escaped \\"__metadata__\\" inside a value, and } { braces'},
        {"__metadata__": "a key of that name inside"},
    ],
)
def test_names_and_braces_inside_strings(tmp_path: Path, metadata: dict[str, str]) -> None:
    read_tensor_index(_write(tmp_path / "seen.safetensors", {"t": "x"}))
    p = _write(tmp_path / "tricky.safetensors", metadata)
    _same(read_tensor_index(p), _full(p))


def test_a_bad_metadata_object_reports_what_a_full_read_reports(tmp_path: Path) -> None:
    read_tensor_index(_write(tmp_path / "seen.safetensors", {"t": "x"}))
    p = _write(tmp_path / "list.safetensors", ["not", "an", "object"])
    with pytest.raises(LoadoutError) as got:
        read_tensor_index(p)
    with pytest.raises(LoadoutError) as want:
        read_header(p)
    assert (got.value.code, got.value.message) == (want.value.code, want.value.message)


def test_a_hit_hands_out_its_own_dict(tmp_path: Path) -> None:
    a = read_tensor_index(_write(tmp_path / "a.safetensors", {"t": "a"}))
    b = read_tensor_index(_write(tmp_path / "b.safetensors", {"t": "b"}))
    a.tensors.clear()
    assert len(b.tensors) == 3 and len(read_tensor_index(tmp_path / "a.safetensors").tensors) == 3


def test_capacity_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(header_cache._entries, "capacity", 2)
    for spare in range(4):
        read_tensor_index(_write(tmp_path / f"f{spare}.safetensors", {"t": "x"}, spare=spare))
    assert len(header_cache._entries) == 2
