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
from core.files.tensor_info import TensorInfo

# ggml type id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
}

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
    with open(p, "rb") as fh:
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
        for _ in range(n_tensors):
            name = r.string()
            ndim = r.u32()
            if ndim > 8:
                raise r._bad(f"tensor {name!r} has {ndim} dimensions")
            dims = [r.u64() for _ in range(ndim)]
            gtype = r.u32()
            r.u64()  # offset
            tname, block, block_bytes = GGML_TYPES.get(gtype, (f"GGML_{gtype}", 1, 0))
            numel = 1
            for d in dims:
                numel *= d
            shape = tuple(reversed(dims))
            tensors[name] = TensorInfo(tname, shape, (numel // block) * block_bytes if block else 0)
    return GGUFHeader(version, tensors, metadata)
