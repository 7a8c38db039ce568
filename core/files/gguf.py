"""GGUF headers (quantised diffusion models and text encoders), read without tensor data.

Layout (little-endian): magic "GGUF", u32 version, u64 tensor count, u64 key/value count, the
key/values, then per tensor: name, u32 n_dims, u64 dims (innermost first), u32 ggml type, u64 offset.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from core.errors import FileFormatError
from core.files.leases import open_input
from core.files.tensor_info import TensorInfo
from core.quant.gguf_types import GGML_TYPES as _TYPES

#: ggml type id -> (name, elements per block, bytes per block); the table is ``core.quant.gguf_types``.
GGML_TYPES: dict[int, tuple[str, int, int]] = {i: (t.name, t.block, t.block_bytes) for i, t in _TYPES.items()}
#: Metadata key ComfyUI-GGUF writes when it stored a tensor reshaped (SD1/SDXL conv kernels, 5-D
#: video weights): the shape the model expects, an int32 array.
ORIG_SHAPE_KEY = "comfy.gguf.orig_shape."

_MAX_COUNT = 10_000_000
_MAX_STRING = 64 * 1024 * 1024


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, Any]


class _Reader:
    def __init__(self, fh: BinaryIO, path: Path, size: int) -> None:
        self.fh, self.path, self.size = fh, path, size

    def _bad(self, why: str) -> FileFormatError:
        return FileFormatError(
            f"{self.path.name} is not a valid GGUF file",
            why=why,
            fix="Download the file again",
            code="invalid_file",
        )

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise FileFormatError(
                f"{self.path.name} is a truncated GGUF file",
                why="the header ends before the file does",
                fix="Download the file again",
                code="truncated",
            )
        return data

    def u32(self) -> int:
        return int(struct.unpack("<I", self.read(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.read(8))[0])

    def string(self) -> str:
        n = self.u64()
        if n > _MAX_STRING:
            raise self._bad(f"a string claims {n:,} bytes")
        return self.read(n).decode("utf-8", errors="replace")

    _SCALARS: ClassVar[dict[int, str]] = {
        0: "<B",
        1: "<b",
        2: "<H",
        3: "<h",
        4: "<I",
        5: "<i",
        6: "<f",
        7: "<?",
        10: "<Q",
        11: "<q",
        12: "<d",
    }

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in self._SCALARS:
            fmt = self._SCALARS[vtype]
            return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]
        if vtype == 8:
            return self.string()
        if vtype == 9 and depth < 3:
            inner, n = self.u32(), self.u64()
            if n > _MAX_COUNT:
                raise self._bad(f"an array claims {n:,} items")
            items = [self.value(inner, depth + 1) for _ in range(n)]
            return items if n <= 64 else f"[{n} items]"
        raise self._bad(f"unknown value type {vtype}")


def read_gguf_header(path: str | os.PathLike[str]) -> GGUFHeader:
    p = Path(path)
    with open_input(p) as fh:
        size = os.fstat(fh.fileno()).st_size
        r = _Reader(fh, p, size)
        if r.read(4) != b"GGUF":
            raise r._bad("it does not start with GGUF")
        version = r.u32()
        if version not in (2, 3):
            raise r._bad(f"GGUF version {version} is not supported (2 and 3 are)")
        n_tensors, n_kv = r.u64(), r.u64()
        if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
            raise r._bad(f"it claims {n_tensors:,} tensors and {n_kv:,} metadata entries")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string()
            metadata[key] = r.value(r.u32())
        tensors: dict[str, TensorInfo] = {}
        spans: list[tuple[str, int, int]] = []
        for _ in range(n_tensors):
            name = r.string()
            ndim = r.u32()
            if ndim > 8:
                raise r._bad(f"tensor {name!r} has {ndim} dimensions")
            dims = [r.u64() for _ in range(ndim)]
            gtype = r.u32()
            offset = r.u64()
            if gtype not in GGML_TYPES:
                raise r._bad(f"tensor {name!r} has an unknown tensor type {gtype}")
            tname, block, block_bytes = GGML_TYPES[gtype]
            numel = 1
            for d in dims:
                numel *= d
            if dims and dims[0] % block:
                raise r._bad(
                    f"tensor {name!r}: rows of {dims[0]} do not split into {tname} blocks of {block}"
                )
            shape = _orig_shape(metadata, name, numel) or tuple(reversed(dims))
            nbytes = (numel // block) * block_bytes
            tensors[name] = TensorInfo(tname, shape, nbytes)
            spans.append((name, offset, nbytes))
        alignment = metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise r._bad(f"general.alignment is {alignment!r}, not a power of two")
        data_start = -(-fh.tell() // alignment) * alignment
        for name, offset, nbytes in spans:
            if data_start + offset + nbytes > size:
                raise FileFormatError(
                    f"{p.name} is a truncated GGUF file",
                    why=f"tensor {name!r} lies outside the file (bytes {data_start + offset:,} to "
                    f"{data_start + offset + nbytes:,} of {size:,})",
                    fix="Download the file again",
                    code="truncated",
                )
        _check_spans(p, spans, alignment)
    return GGUFHeader(version, tensors, metadata)


def _check_spans(p: Path, spans: list[tuple[str, int, int]], alignment: int) -> None:
    """Each tensor starts on the file's alignment and no two tensors share bytes (a crafted file
    could make one weight read another's data, or read it misaligned)."""

    def bad(why: str) -> FileFormatError:
        return FileFormatError(
            f"{p.name} is not a valid GGUF file",
            why=why,
            fix="Download the file again",
            code="invalid_offsets",
        )

    end, last = 0, ""
    for name, offset, nbytes in sorted(spans, key=lambda s: (s[1], s[2])):
        if offset % alignment:
            raise bad(f"tensor {name!r} starts at {offset:,}, not a multiple of the alignment {alignment}")
        if offset < end:
            raise bad(
                f"tensors {last!r} and {name!r} overlap (bytes {offset:,} to {min(end, offset + nbytes):,})"
            )
        end, last = offset + nbytes, name


def _orig_shape(metadata: dict[str, Any], name: str, numel: int) -> tuple[int, ...] | None:
    """The shape ComfyUI-GGUF recorded for a tensor it stored reshaped, when it is consistent."""
    value = metadata.get(ORIG_SHAPE_KEY + name)
    if not isinstance(value, list) or not all(isinstance(v, int) and v >= 0 for v in value):
        return None
    total = 1
    for v in value:
        total *= v
    return tuple(value) if total == numel else None


#: llama.cpp's names for a T5/UMT5 encoder, as ComfyUI-GGUF's text-encoder files use them, and the
#: transformers names they stand for (replaced in this order, as ComfyUI-GGUF does).
T5_NAMES: tuple[tuple[str, str], ...] = (
    ("enc.", "encoder."),
    (".blk.", ".block."),
    ("token_embd", "shared"),
    ("output_norm", "final_layer_norm"),
    ("attn_q", "layer.0.SelfAttention.q"),
    ("attn_k", "layer.0.SelfAttention.k"),
    ("attn_v", "layer.0.SelfAttention.v"),
    ("attn_o", "layer.0.SelfAttention.o"),
    ("attn_norm", "layer.0.layer_norm"),
    ("attn_rel_b", "layer.0.SelfAttention.relative_attention_bias"),
    ("ffn_up", "layer.1.DenseReluDense.wi_1"),
    ("ffn_down", "layer.1.DenseReluDense.wo"),
    ("ffn_gate", "layer.1.DenseReluDense.wi_0"),
    ("ffn_norm", "layer.1.layer_norm"),
)
#: a key only a llama.cpp-named T5 encoder has
T5_PROBE = "enc.blk.0.attn_k.weight"


def t5_transformers_names(tensors: dict[str, TensorInfo]) -> dict[str, str] | None:
    """``{transformers name: GGUF name}`` for a llama.cpp-named T5 encoder; None for other files."""
    if T5_PROBE not in tensors:
        return None
    renamed: dict[str, str] = {}
    for name in tensors:
        new = name
        for old, replacement in T5_NAMES:
            new = new.replace(old, replacement)
        renamed[new] = name
    return renamed
