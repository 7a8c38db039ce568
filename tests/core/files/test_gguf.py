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


def _patch_u32_after(data: bytes, name: str, skip_dims: int, value: int) -> bytes:
    """Overwrite the ggml type of tensor ``name`` (after its name, n_dims and ``skip_dims`` dims)."""
    at = data.index(name.encode()) + len(name) + 4 + 8 * skip_dims
    return data[:at] + value.to_bytes(4, "little") + data[at + 4 :]


def test_unknown_tensor_type_is_a_clear_error(tmp_path: Path) -> None:
    p = write_gguf(tmp_path / "m.gguf", {"w": ("Q8_0", (2, 64))}, {"general.architecture": "flux"})
    p.write_bytes(_patch_u32_after(p.read_bytes(), "w", 2, 99))
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "invalid_file" and "unknown tensor type 99" in err.value.why


def test_tensor_outside_the_file_is_truncation(tmp_path: Path) -> None:
    p = write_gguf(tmp_path / "m.gguf", {"a": ("F32", (8,)), "w": ("Q8_0", (4, 64))}, {})
    p.write_bytes(p.read_bytes()[:-100])  # the header is whole, the data is not
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "truncated" and "'w' lies outside the file" in err.value.why


def test_rows_that_do_not_split_into_blocks_are_refused(tmp_path: Path) -> None:
    p = write_gguf(tmp_path / "m.gguf", {"w": ("Q8_0", (2, 64))}, {})
    data = p.read_bytes()
    at = data.index(b"w") + 1 + 4
    p.write_bytes(data[:at] + (48).to_bytes(8, "little") + data[at + 8 :])  # rows of 48
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert "do not split into Q8_0 blocks of 32" in err.value.why


def test_comfy_orig_shape_gives_the_logical_shape(tmp_path: Path) -> None:
    import gguf
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    p = tmp_path / "unet.gguf"
    w = gguf.GGUFWriter(p, "sd1")
    conv = np.random.default_rng(0).standard_normal((64, 32 * 3 * 3)).astype(np.float32)
    w.add_tensor(
        "input_blocks.1.0.in_layers.2.weight",
        quants.quantize(conv, GGMLQuantizationType.Q8_0),
        raw_dtype=GGMLQuantizationType.Q8_0,
    )
    w.add_array("comfy.gguf.orig_shape.input_blocks.1.0.in_layers.2.weight", [64, 32, 3, 3])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = read_tensor_index(p).tensors["input_blocks.1.0.in_layers.2.weight"]
    assert info.shape == (64, 32, 3, 3) and info.dtype == "Q8_0" and info.nbytes == 64 * 9 * 34


def test_reading_data_of_a_damaged_file_fails_cleanly(tmp_path: Path) -> None:
    from core.files.gguf_data import GGUFTensors

    p = write_gguf(tmp_path / "m.gguf", {"w": ("Q8_0", (2, 64))}, {"general.alignment": 3})
    with pytest.raises(FileFormatError) as err:
        GGUFTensors(p)
    assert "alignment" in err.value.why
