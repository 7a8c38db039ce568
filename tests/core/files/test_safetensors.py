"""The safetensors reader: full validation from the header alone, zero-copy lazy tensors."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core.errors import FileAccessError, FileFormatError
from core.files import read_tensor_index
from core.files.safetensors import SafetensorsFile, read_header
from tests.fixtures.st_files import write_raw_header, write_sparse, write_tensors


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _entry(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, object]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def test_reads_header_of_real_file_without_touching_data(tmp_path: Path) -> None:
    tensors = {
        "a.weight": torch.randn(4, 3),
        "b": torch.arange(5, dtype=torch.int64),
        "c": torch.randn(2, 2).to(torch.bfloat16),
    }
    p = write_tensors(tmp_path / "m.safetensors", tensors, metadata={"modelspec.title": "x"})
    h = read_header(p)
    assert h.tensors["a.weight"].dtype == "F32" and h.tensors["a.weight"].shape == (4, 3)
    assert h.tensors["b"].dtype == "I64" and h.tensors["c"].dtype == "BF16"
    assert h.metadata == {"modelspec.title": "x"}
    assert h.warnings == []


def test_lazy_tensors_are_zero_copy_views_equal_to_reference(tmp_path: Path) -> None:
    tensors = {"w": torch.randn(64, 32), "h": torch.randn(7).half(), "e": torch.zeros(0, 3)}
    p = write_tensors(tmp_path / "m.safetensors", tensors)
    ref = load_file(str(p))
    with SafetensorsFile(p) as f:
        for name in ref:
            t = f.tensor(name)
            assert torch.equal(t, ref[name]) and t.dtype == ref[name].dtype
        w = f.tensor("w")
        # A view on the mapping, not a copy: writing through it must not touch the file.
        before = _digest(p)
        w.mul_(0)
        assert _digest(p) == before


def _bytes_read() -> int:
    """This process's bytes read through read() calls so far (Linux's /proc/self/io ``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_sparse_full_size_file_costs_no_disk(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "big.safetensors", {"w": (40960, 40960)})  # 3.4 GB logical
    assert p.stat().st_size > 3_000_000_000
    assert p.stat().st_blocks * 512 < 1_000_000
    before = _bytes_read()
    info = read_tensor_index(p)
    assert _bytes_read() - before < 1_000_000  # the header, not the 3.4 GB of data
    assert info.tensors["w"].nbytes == 40960 * 40960 * 2


def test_sft_extension_and_misnamed_files_are_detected_by_content(tmp_path: Path) -> None:
    src = write_tensors(tmp_path / "a.safetensors", {"x": torch.ones(2)})
    for name in ("a.sft", "a.ckpt", "noext"):
        dst = tmp_path / name
        dst.write_bytes(src.read_bytes())
        assert read_tensor_index(dst).format == "safetensors"


def test_metadata_non_string_values_are_kept_as_json_with_warning(tmp_path: Path) -> None:
    body = json.dumps({"__metadata__": {"n": 3}, "x": _entry("F32", [1], 0, 4)}).encode()
    p = write_raw_header(tmp_path / "m.safetensors", body, data=b"\0" * 4)
    h = read_header(p)
    assert h.metadata == {"n": "3"}
    assert any("not a string" in w for w in h.warnings)


def test_a_header_of_many_tensors_is_read_whole(tmp_path: Path) -> None:
    # the time it takes (a million tensors) is bench/header.py's, recorded in docs/benchmarks.md
    n = 200_000
    entries = {f"t{i}": _entry("U8", [1], i, i + 1) for i in range(n)}
    body = json.dumps(entries, separators=(",", ":")).encode()
    p = write_raw_header(tmp_path / "many.safetensors", body, data=b"\0" * n)
    h = read_header(p)
    assert len(h.tensors) == n
    assert h.offsets["t123456"] == (123456, 123457)


BAD_HEADERS: list[tuple[str, bytes, bytes, str]] = [
    ("invalid json", b"{not json", b"", "invalid_header"),
    ("json list", b"[1, 2]", b"", "invalid_header"),
    ("not utf8", b'{"\xff\xfe": 1}', b"", "invalid_header"),
    ("unknown dtype", json.dumps({"x": _entry("F12", [1], 0, 2)}).encode(), b"\0\0", "unknown_dtype"),
    ("negative shape", json.dumps({"x": _entry("F32", [-1], 0, 4)}).encode(), b"\0" * 4, "invalid_shape"),
    ("float shape", json.dumps({"x": _entry("F32", [1.5], 0, 4)}).encode(), b"\0" * 4, "invalid_shape"),
    ("bool shape", json.dumps({"x": _entry("F32", [True], 0, 4)}).encode(), b"\0" * 4, "invalid_shape"),
    (
        "offset mismatch",
        json.dumps({"x": _entry("F32", [2], 0, 4)}).encode(),
        b"\0" * 4,
        "invalid_offsets",
    ),
    (
        "out of bounds",
        json.dumps({"x": _entry("F32", [2], 0, 8)}).encode(),
        b"\0" * 4,
        "truncated",
    ),
    (
        "overlap",
        json.dumps({"x": _entry("F32", [2], 0, 8), "y": _entry("F32", [1], 4, 8)}).encode(),
        b"\0" * 8,
        "invalid_offsets",
    ),
    (
        "gap",
        json.dumps({"x": _entry("F32", [1], 4, 8)}).encode(),
        b"\0" * 8,
        "invalid_offsets",
    ),
    (
        "offsets not ints",
        json.dumps({"x": _entry("F32", [1], 0, 4) | {"data_offsets": "0-4"}}).encode(),
        b"\0" * 4,
        "invalid_offsets",
    ),
    ("entry not object", json.dumps({"x": 3}).encode(), b"", "invalid_header"),
    ("metadata not object", json.dumps({"__metadata__": [1]}).encode(), b"", "invalid_header"),
]


@pytest.mark.parametrize(("label", "body", "data", "code"), BAD_HEADERS, ids=[b[0] for b in BAD_HEADERS])
def test_bad_headers_give_clear_errors_and_leave_file_untouched(
    tmp_path: Path, label: str, body: bytes, data: bytes, code: str
) -> None:
    p = write_raw_header(tmp_path / "bad.safetensors", body, data=data)
    before = _digest(p)
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == code, err.value.message
    assert "bad.safetensors" in err.value.message
    assert err.value.fix
    assert _digest(p) == before


@pytest.mark.parametrize("size", [0, 1, 7])
def test_empty_and_tiny_files(tmp_path: Path, size: int) -> None:
    p = tmp_path / "tiny.safetensors"
    p.write_bytes(b"\x01" * size)
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code in ("empty_file", "truncated")
    assert ("empty" in err.value.message) == (size == 0)


def test_header_length_past_end_of_file(tmp_path: Path) -> None:
    p = tmp_path / "short.safetensors"
    p.write_bytes(struct.pack("<Q", 5000) + b"{}")
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "truncated" and "5,000" in err.value.message


@pytest.mark.parametrize("claimed", [2**40, 2**64 - 1, 100 * 1024 * 1024 + 1])
def test_absurd_header_length_is_refused_without_reading(tmp_path: Path, claimed: int) -> None:
    p = tmp_path / "absurd.safetensors"
    p.write_bytes(struct.pack("<Q", claimed) + b"{" + b" " * 64)
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "header_too_large"


def test_header_over_cap_is_refused(tmp_path: Path) -> None:
    body = json.dumps({"x": _entry("F32", [1], 0, 4)}).encode()
    p = write_raw_header(tmp_path / "m.safetensors", body, data=b"\0" * 4)
    with pytest.raises(FileFormatError) as err:
        read_header(p, cap=10)
    assert err.value.code == "header_too_large"


def test_truncated_data_area(tmp_path: Path) -> None:
    p = write_tensors(tmp_path / "m.safetensors", {"x": torch.randn(100)})
    raw = p.read_bytes()
    p.write_bytes(raw[:-50])
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "truncated"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"hello, this is a text file that someone named .safetensors\n", "text file"),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "PNG image"),
        (b"<!DOCTYPE html><html><body>404</body></html>", "web page"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 5\n", "Git LFS"),
    ],
)
def test_non_model_files_named_safetensors(tmp_path: Path, content: bytes, why: str) -> None:
    p = tmp_path / "fake.safetensors"
    p.write_bytes(content)
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert why in err.value.message


def test_directory_and_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileAccessError) as err:
        read_tensor_index(tmp_path)
    assert err.value.code == "is_directory"
    with pytest.raises(FileAccessError) as err:
        read_tensor_index(tmp_path / "nope.safetensors")
    assert err.value.code == "not_found"


def test_trailing_bytes_are_a_warning_not_an_error(tmp_path: Path) -> None:
    body = json.dumps({"x": _entry("F32", [1], 0, 4)}).encode()
    p = write_raw_header(tmp_path / "m.safetensors", body, data=b"\0" * 12)
    h = read_header(p)
    assert any("unused data" in w for w in h.warnings)


def test_tensors_are_views_at_the_file_offset_or_aligned_copies(tmp_path: Path) -> None:
    """A tensor whose offset is a multiple of its element size is a zero-copy view at the file's own
    address residue (placement keeps it); one that is not is copied into a 64-byte aligned tensor."""
    a = torch.arange(5, dtype=torch.uint8)  # 5 bytes: whatever follows is off its element size
    b = torch.linspace(-1, 1, 12).view(3, 4)
    c = torch.linspace(0, 2, 6).to(torch.bfloat16)
    header = {
        "a": {"dtype": "U8", "shape": [5], "data_offsets": [0, 5]},
        "b": {"dtype": "F32", "shape": [3, 4], "data_offsets": [5, 53]},
        "c": {"dtype": "BF16", "shape": [6], "data_offsets": [53, 65]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * ((-8 - len(raw)) % 64)  # data starts on a 64-byte boundary
    data = b"".join(t.reshape(-1).view(torch.uint8).numpy().tobytes() for t in (a, b, c))
    path = write_raw_header(tmp_path / "odd.safetensors", raw, data=data)
    with SafetensorsFile(path) as f:
        ta, tb, tc = f.tensor("a"), f.tensor("b"), f.tensor("c")
        assert f.tensor("a").data_ptr() == ta.data_ptr()  # a view on the mapping: same address
        assert f.tensor("b").data_ptr() != tb.data_ptr()  # a copy each time
    assert torch.equal(ta, a) and torch.equal(tb, b) and torch.equal(tc, c)
    assert ta.data_ptr() % 64 == 0  # the file's own address: data starts on a 64-byte boundary
    assert tb.data_ptr() % 64 == 0 and tc.data_ptr() % 64 == 0  # copied, aligned: 5 and 53 are odd
    ref = load_file(str(path))
    assert all(torch.equal(ref[k], t) for k, t in {"a": a, "b": b, "c": c}.items())
