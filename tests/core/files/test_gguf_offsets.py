"""A GGUF file whose tensors overlap or start off the file's alignment is refused by the header
reader (it was accepted: one weight could read another's bytes)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from core.errors import LoadoutError
from core.files.gguf import read_gguf_header
from tests.fixtures.gguf_files import GGML, write_gguf


def _file(tmp_path: Path) -> tuple[Path, bytes]:
    path = write_gguf(tmp_path / "m.gguf", {"a.weight": ("F32", (8, 8)), "b.weight": ("F32", (8, 8))},
                      {"general.architecture": "sd1"})  # fmt: skip
    return path, path.read_bytes()


@pytest.mark.parametrize(("new_offset", "said"), [(0, "overlap"), (4, "not a multiple of the alignment 32"),
                                                  (128, "overlap")])  # fmt: skip
def test_overlapping_or_unaligned_tensors_are_refused(tmp_path: Path, new_offset: int, said: str) -> None:
    path, data = _file(tmp_path)
    read_gguf_header(path)  # the file as written is fine
    at = data.index(b"b.weight") + len(b"b.weight") + 4 + 2 * 8 + 4  # past n_dims, dims, type
    assert struct.unpack_from("<Q", data, at)[0] == 256 and GGML["F32"][0] == 0
    path.write_bytes(data[:at] + struct.pack("<Q", new_offset) + data[at + 8 :])
    with pytest.raises(LoadoutError, match=said) as caught:
        read_gguf_header(path)
    assert caught.value.code == "invalid_offsets"
