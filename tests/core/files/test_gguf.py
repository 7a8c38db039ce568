"""GGUF headers are read without tensor data; damaged ones give clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import FileFormatError
from core.files import read_tensor_index
from tests.fixtures.gguf_files import write_gguf


def test_gguf_header(tmp_path: Path) -> None:
    p = write_gguf(
        tmp_path / "flux1-dev-Q4_K.gguf",
        {"double_blocks.0.img_attn.qkv.weight": ("Q4_K", (9216, 3072)), "img_in.bias": ("F32", (3072,))},
        {"general.architecture": "flux", "general.quantization_version": 2},
    )
    idx = read_tensor_index(p)
    assert idx.format == "gguf"
    qkv = idx.tensors["double_blocks.0.img_attn.qkv.weight"]
    assert qkv.shape == (9216, 3072) and qkv.dtype == "Q4_K"
    assert qkv.nbytes == 9216 * 3072 // 256 * 144
    assert idx.metadata["general.architecture"] == "flux"


def test_truncated_gguf(tmp_path: Path) -> None:
    p = write_gguf(tmp_path / "m.gguf", {"a": ("F16", (4, 4))}, {"general.name": "x" * 100})
    p.write_bytes(p.read_bytes()[:60])
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "truncated"


def test_gguf_absurd_counts(tmp_path: Path) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(
        b"GGUF" + (3).to_bytes(4, "little") + (2**62).to_bytes(8, "little") + (0).to_bytes(8, "little")
    )
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert "claims" in err.value.message
