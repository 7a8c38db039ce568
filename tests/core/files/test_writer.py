"""Atomic, streaming safetensors writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core.errors import FileAccessError
from core.files.safetensors import read_header
from core.files.writer import refuse_same_file, write_safetensors


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a": torch.randn(3, 5, generator=g),
        "b": torch.randn(7, generator=g).to(torch.bfloat16),
        "c": torch.randn(2, 2, generator=g).to(torch.float8_e4m3fn),
        "d": torch.arange(4),
        "e": torch.zeros(0, 3),
        "f": torch.randn(4, 4, generator=g).t(),  # non-contiguous
    }


def test_round_trip_is_bitwise_and_readable_by_reference(tmp_path: Path) -> None:
    t = _tensors()
    p = write_safetensors(tmp_path / "out.safetensors", t, {"modelspec.title": "x"})
    ref = load_file(str(p))
    for k, v in t.items():
        assert ref[k].dtype == v.dtype
        assert torch.equal(ref[k].view(torch.uint8), v.contiguous().view(torch.uint8))
    assert read_header(p).metadata == {"modelspec.title": "x"}
    assert not list(tmp_path.glob(".*partial"))


def test_failure_midway_leaves_old_file_and_no_partial(tmp_path: Path) -> None:
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"old contents")
    calls = {"n": 0}

    def check() -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_safetensors(out, _tensors(), check=check)
    assert out.read_bytes() == b"old contents"
    assert list(tmp_path.iterdir()) == [out]


def test_output_equal_to_input_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    src.write_bytes(b"x")
    (tmp_path / "link.safetensors").symlink_to(src)
    for out in (src, tmp_path / "link.safetensors", tmp_path / "." / "m.safetensors"):
        with pytest.raises(FileAccessError) as err:
            refuse_same_file(out, src)
        assert err.value.code == "output_is_input"
    refuse_same_file(tmp_path / "other.safetensors", src)


def test_data_starts_on_a_64_byte_boundary(tmp_path: Path) -> None:
    """Loadout's files put every tensor whose offset is a multiple of 64 on a 64-byte boundary of
    the mapping (the header is padded with spaces, which the reference reader accepts)."""
    from core.files.safetensors import SafetensorsFile

    for title in ("x", "xy", "a much longer title " * 3):
        t = {"w": torch.randn(16, 16), "b": torch.randn(16).half()}
        p = write_safetensors(tmp_path / "out.safetensors", t, {"modelspec.title": title})
        assert read_header(p).data_start % 64 == 0
        with SafetensorsFile(p) as f:
            assert f.tensor("w").data_ptr() % 64 == 0 and f.tensor("b").data_ptr() % 64 == 0
        assert all(torch.equal(load_file(str(p))[k], v) for k, v in t.items())
