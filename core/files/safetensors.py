"""safetensors: a header reader that validates everything and reads no tensor data, and a
memory-mapped lazy reader that hands out zero-copy tensors.

Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``, then
the data. Offsets are relative to the end of the header.
"""

from __future__ import annotations

import errno
import gc
import json
import mmap
import os
import struct
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import torch

from core.errors import FileFormatError
from core.files.dtypes import DTYPES, nbytes_for
from core.files.guard import changed_error
from core.files.tensor_info import TensorInfo

#: The reference implementation refuses headers over 100 MB; so do we, by default.
HEADER_SIZE_CAP = 100 * 1024 * 1024
_BITS = {name: d.bits for name, d in DTYPES.items()}


_FIX_REDOWNLOAD = "Download the file again, or re-save it with a tool you trust"


@dataclass(frozen=True)
class SafetensorsHeader:
    """A validated header: tensors in file order, metadata, where the data starts."""

    path: Path
    tensors: dict[str, TensorInfo]
    offsets: dict[str, tuple[int, int]]
    metadata: dict[str, str]
    data_start: int
    file_size: int
    warnings: list[str] = field(default_factory=list)


def _bad(path: Path, what: str, why: str, *, code: str = "invalid_file", fix: str = "") -> FileFormatError:
    return FileFormatError(
        f"{path.name} is not a valid safetensors file: {what}",
        why=why,
        fix=fix or _FIX_REDOWNLOAD,
        code=code,
    )


def read_header_from(
    fh: BinaryIO, path: Path, file_size: int, *, cap: int = HEADER_SIZE_CAP
) -> SafetensorsHeader:
    """Read and validate the header of an open file. Reads at most 8 + min(N, cap) bytes."""
    if file_size == 0:
        raise _bad(
            path,
            "the file is empty",
            "it has 0 bytes",
            code="empty_file",
            fix="The download or copy did not finish; get the file again",
        )
    if file_size < 8:
        raise _bad(
            path,
            f"the file has only {file_size} bytes",
            "a safetensors file starts with an 8-byte header length",
            code="truncated",
        )
    fh.seek(0)
    (n,) = struct.unpack("<Q", fh.read(8))
    if n > cap:
        raise _bad(
            path,
            f"the header claims {n:,} bytes",
            f"that is over the {cap // (1024 * 1024)} MB limit for a header, so the file "
            "is damaged or not safetensors",
            code="header_too_large",
        )
    if 8 + n > file_size:
        raise _bad(
            path,
            f"the header claims {n:,} bytes but the file has only {file_size:,}",
            "the file is truncated or is not safetensors",
            code="truncated",
        )
    raw = fh.read(n)
    if len(raw) != n:
        raise _bad(
            path, "the header could not be read in full", "the file shrank while reading", code="truncated"
        )
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(
            path, "the header is not UTF-8 text", f"byte {exc.start} is invalid", code="invalid_header"
        ) from None
    try:
        # orjson parses a 2,500-tensor header in about half the time of the standard library.
        with _gc_paused():
            obj = orjson.loads(raw)
    except json.JSONDecodeError as exc:
        raise _bad(
            path, "the header is not valid JSON", f"{exc.msg} at character {exc.pos}", code="invalid_header"
        ) from None
    if not isinstance(obj, dict):
        raise _bad(
            path,
            "the header is not a JSON object",
            f"it is a JSON {type(obj).__name__}",
            code="invalid_header",
        )
    data_start = 8 + n
    with _gc_paused():
        return _validate(path, obj, data_start, file_size)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: building thousands of small tuples otherwise triggers
    collections that walk every live object (torch's included) and cost more than the parsing.
    The code inside creates no reference cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _numel(shape: Any) -> int:
    """Element count of a valid shape (a list of non-negative ints), or -1 for anything else."""
    if type(shape) is not list:
        return -1
    n = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            return -1
        n *= dim
    return n


def _entry_error(path: Path, name: str, entry: Any, data_size: int) -> FileFormatError:
    """The specific error for a tensor entry the fast path rejected."""
    if type(entry) is not dict:
        return _bad(path, f"the entry for tensor {name!r} is not an object", "", code="invalid_header")
    dtype_name = entry.get("dtype")
    dt = DTYPES.get(dtype_name) if type(dtype_name) is str else None
    if dt is None:
        return _bad(
            path,
            f"tensor {name!r} has unknown dtype {dtype_name!r}",
            "known dtypes are " + ", ".join(DTYPES),
            code="unknown_dtype",
            fix="If the file is new, update Loadout; otherwise the file is damaged",
        )
    shape: Any = entry.get("shape")
    numel = _numel(shape)
    if numel < 0:
        return _bad(
            path,
            f"tensor {name!r} has an invalid shape {shape!r}",
            "a shape is a list of non-negative integers",
            code="invalid_shape",
        )
    offs = entry.get("data_offsets")
    if type(offs) is not list or len(offs) != 2 or type(offs[0]) is not int or type(offs[1]) is not int:
        return _bad(
            path,
            f"tensor {name!r} has invalid data_offsets {offs!r}",
            "data_offsets is a list of two integers [begin, end]",
            code="invalid_offsets",
        )
    begin, end = offs
    expected = nbytes_for(dt, numel)
    if begin < 0 or end < begin:
        return _bad(
            path,
            f"tensor {name!r} has data_offsets {offs}",
            "begin must be >= 0 and <= end",
            code="invalid_offsets",
        )
    if end - begin != expected:
        return _bad(
            path,
            f"tensor {name!r} spans {end - begin:,} bytes but its shape {tuple(shape)} "
            f"of {dt.name} needs {expected:,}",
            "the header does not match its data",
            code="invalid_offsets",
        )
    if end > data_size:
        return _bad(
            path,
            f"tensor {name!r} ends at byte {end:,} of a {data_size:,}-byte data area",
            "the file is truncated",
            code="truncated",
        )
    return _bad(path, f"the entry for tensor {name!r} is malformed", repr(entry)[:200], code="invalid_header")


def _validate(path: Path, obj: dict[str, Any], data_start: int, file_size: int) -> SafetensorsHeader:
    warnings: list[str] = []
    metadata: dict[str, str] = {}
    raw_meta = obj.pop("__metadata__", None)
    if raw_meta is not None:
        if not isinstance(raw_meta, dict):
            raise _bad(
                path,
                "__metadata__ is not an object",
                f"it is a JSON {type(raw_meta).__name__}",
                code="invalid_header",
            )
        for k, v in raw_meta.items():
            if isinstance(v, str):
                metadata[str(k)] = v
            else:
                metadata[str(k)] = json.dumps(v)
                warnings.append(f"metadata value {k!r} is not a string; shown as JSON")

    tensors: dict[str, TensorInfo] = {}
    offsets: dict[str, tuple[int, int]] = {}
    data_size = file_size - data_start
    bits_of = _BITS
    for name, entry in obj.items():
        # The fast path: headers of thousands of tensors are common, and this runs for every file
        # the library indexes. Anything unusual goes to _entry_error, which says what is wrong.
        try:
            dtype_name = entry["dtype"]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
            bits = bits_of[dtype_name]
            numel = 1
            for dim in shape:
                if type(dim) is not int or dim < 0:
                    raise ValueError
                numel *= dim
        except Exception:
            raise _entry_error(path, name, entry, data_size) from None
        if (
            type(shape) is not list
            or type(begin) is not int
            or type(end) is not int
            or begin < 0
            or end - begin != (numel * bits + 7) // 8
            or end > data_size
        ):
            raise _entry_error(path, name, entry, data_size)
        tensors[name] = TensorInfo(dtype_name, tuple(shape), end - begin)
        offsets[name] = (begin, end)

    # In order, no overlap, no gaps (the reference implementation's rule). Zero-size tensors
    # may sit anywhere.
    spans = sorted((b, e, n) for n, (b, e) in offsets.items() if e > b)
    cursor = 0
    for b, e, n in spans:
        if b < cursor:
            raise _bad(
                path,
                f"tensor {n!r} overlaps the tensor before it",
                f"it starts at byte {b:,}, inside data that ends at {cursor:,}",
                code="invalid_offsets",
            )
        if b > cursor:
            raise _bad(
                path,
                f"there is a gap of {b - cursor:,} bytes before tensor {n!r}",
                "tensor data must be packed back to back",
                code="invalid_offsets",
            )
        cursor = e
    if cursor < data_size:
        warnings.append(f"{data_size - cursor:,} bytes of unused data after the last tensor")
    return SafetensorsHeader(path, tensors, offsets, metadata, data_start, file_size, warnings)


def read_header(path: str | os.PathLike[str], *, cap: int = HEADER_SIZE_CAP) -> SafetensorsHeader:
    """Read and fully validate the header of a safetensors file. Never reads tensor data."""
    p = Path(path)
    with open(p, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        return read_header_from(fh, p, size, cap=cap)


def _map(fileno: int, size: int) -> tuple[mmap.mmap, bool]:
    """Copy-on-write when the kernel allows it; read-only shared otherwise.

    A private writable mapping is charged in full against the kernel's commit limit, so a file
    larger than RAM + swap (a 22 GiB Flux on a 16 GiB machine) cannot be mapped that way. A
    read-only shared mapping is not charged: pages come and go with the page cache.
    """
    try:
        return mmap.mmap(fileno, size, access=mmap.ACCESS_COPY), True
    except OSError as exc:
        if exc.errno != errno.ENOMEM:
            raise
    return mmap.mmap(fileno, size, access=mmap.ACCESS_READ), False


class SafetensorsFile:
    """A memory-mapped safetensors file handing out zero-copy tensors.

    The mapping is copy-on-write: a tensor modified in place gets private pages and the file is
    never written. Pages are read from disk only when a tensor's data is touched.
    """

    def __init__(self, path: str | os.PathLike[str], *, header: SafetensorsHeader | None = None) -> None:
        """``header``: the file's header already read (by ``read_tensor_index``), so a load parses
        it once; read again when the file's size no longer matches it."""
        self.header = header if header is not None and header.path == Path(path) else read_header(path)
        self.path = self.header.path
        self._fh = open(self.path, "rb")  # noqa: SIM115 - lives as long as the mapping
        if os.fstat(self._fh.fileno()).st_size != self.header.file_size:  # rewritten since: read again
            self.header = read_header(self.path)
        size = self.header.file_size
        self._mmap: mmap.mmap | None = None
        #: False when the file had to be mapped read-only (see _map): its tensors must never be
        #: written in place. Loadout never does: patches and casts always make new tensors.
        self.writable = True
        if size > 0:
            self._mmap, self.writable = _map(self._fh.fileno(), size)

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        # Tensors handed out keep the mapping alive through their buffer; closing the file
        # descriptor is always safe.
        self._fh.close()

    def keys(self) -> list[str]:
        return list(self.header.tensors)

    def __iter__(self) -> Iterator[str]:
        return iter(self.header.tensors)

    def __len__(self) -> int:
        return len(self.header.tensors)

    @property
    def metadata(self) -> dict[str, str]:
        return self.header.metadata

    def _locate(self, name: str) -> tuple[torch.dtype, int, int, int]:
        """(torch dtype, element size, absolute start, byte count) of a tensor's data."""
        info = self.header.tensors[name]
        dt = DTYPES[info.dtype]
        tdt = dt.torch_dtype
        if tdt is None:
            raise FileFormatError(
                f"tensor {name!r} in {self.path.name} is stored as {dt.name}",
                why="this version of torch cannot represent that dtype",
                fix="Update torch, or convert the file to a supported dtype",
                code="unsupported_dtype",
            )
        begin, end = self.header.offsets[name]
        return tdt, max(1, dt.bits // 8), self.header.data_start + begin, end - begin

    def tensor(self, name: str) -> torch.Tensor:
        """The named tensor as a view on the mapped file, at the file's own address (placement keeps
        that address modulo 64 in every copy it makes: ``core.ops.alignment``). Copied only when its
        offset is not a multiple of its element size, which torch cannot view: then into a fresh
        tensor (64-byte aligned, like every allocation of torch's CPU allocator)."""
        info = self.header.tensors[name]
        tdt, itemsize, start, count = self._locate(name)
        if info.numel == 0:
            return torch.empty(info.shape, dtype=tdt)
        assert self._mmap is not None
        with warnings.catch_warnings():
            # torch warns that a read-only buffer must not be written: see ``writable``
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            if start % itemsize:
                raw = torch.frombuffer(self._mmap, dtype=torch.uint8, count=count, offset=start)
                flat = raw.clone().view(tdt)
            else:
                flat = torch.frombuffer(self._mmap, dtype=tdt, count=info.numel, offset=start)
        return flat.view(info.shape)

    def read_tensor(self, name: str) -> torch.Tensor:
        """The named tensor read into fresh memory with plain file reads, never through the mapping:
        a file truncated meanwhile gives a short read, which is :class:`FileChangedError` (a mapped
        page past the end would be a SIGBUS). For readers that copy each tensor once anyway
        (``convert``)."""
        info = self.header.tensors[name]
        tdt, _, start, count = self._locate(name)
        out = torch.empty(count, dtype=torch.uint8)
        if count:
            view = memoryview(out.numpy().data).cast("B")
            with open(self.path, "rb") as fh:
                if os.fstat(fh.fileno()).st_size != self.header.file_size:
                    raise changed_error(self.path)
                fh.seek(start)
                done = 0
                while done < count:
                    got = fh.readinto(view[done:])
                    if not got:
                        raise changed_error(self.path)
                    done += got
        return out.view(tdt).view(info.shape)
