"""safetensors: a header reader that validates everything and reads no tensor data, and a
memory-mapped lazy reader that hands out zero-copy tensors.

Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``, then
the data. Offsets are relative to the end of the header. Checking the parsed header entry by
entry is :mod:`core.files.safetensors_header`'s part.
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
from pathlib import Path
from typing import Any, BinaryIO

try:
    import resource
except ImportError:  # Windows: no address-space limit to name
    resource = None  # type: ignore[assignment]

import orjson
import torch

from core.errors import FileFormatError, LoadoutError
from core.files.dtypes import DTYPES
from core.files.guard import changed_error
from core.files.leases import open_input
from core.files.safetensors_header import SafetensorsHeader, header_error, validate_header

#: The reference implementation refuses headers over 100 MB; so do we, by default.
HEADER_SIZE_CAP = 100 * 1024 * 1024

__all__ = ["HEADER_SIZE_CAP", "SafetensorsFile", "SafetensorsHeader", "read_header", "read_header_from"]


def read_header_from(
    fh: BinaryIO, path: Path, file_size: int, *, cap: int = HEADER_SIZE_CAP
) -> SafetensorsHeader:
    """Read and validate the header of an open file. Reads at most 8 + min(N, cap) bytes."""
    raw = _header_bytes(fh, path, file_size, cap)
    obj = _header_json(path, raw)
    with _gc_paused():
        return validate_header(path, obj, 8 + len(raw), file_size)


def _header_bytes(fh: BinaryIO, path: Path, file_size: int, cap: int) -> bytes:
    """The N header bytes after the 8-byte length, once the length is plausible for the file."""
    if file_size == 0:
        raise header_error(
            path,
            "the file is empty",
            "it has 0 bytes",
            code="empty_file",
            fix="The download or copy did not finish; get the file again",
        )
    if file_size < 8:
        raise header_error(
            path,
            f"the file has only {file_size} bytes",
            "a safetensors file starts with an 8-byte header length",
            code="truncated",
        )
    fh.seek(0)
    (n,) = struct.unpack("<Q", fh.read(8))
    if n > cap:
        raise header_error(
            path,
            f"the header claims {n:,} bytes",
            f"that is over the {cap // (1024 * 1024)} MB limit for a header, so the file "
            "is damaged or not safetensors",
            code="header_too_large",
        )
    if 8 + n > file_size:
        raise header_error(
            path,
            f"the header claims {n:,} bytes but the file has only {file_size:,}",
            "the file is truncated or is not safetensors",
            code="truncated",
        )
    raw = fh.read(n)
    if len(raw) != n:
        raise header_error(
            path, "the header could not be read in full", "the file shrank while reading", code="truncated"
        )
    return raw


def _header_json(path: Path, raw: bytes) -> dict[str, Any]:
    """The header's UTF-8 JSON object."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise header_error(
            path, "the header is not UTF-8 text", f"byte {exc.start} is invalid", code="invalid_header"
        ) from None
    try:
        # orjson parses a 2,500-tensor header in about half the time of the standard library.
        with _gc_paused():
            obj = orjson.loads(raw)
    except json.JSONDecodeError as exc:
        raise header_error(
            path, "the header is not valid JSON", f"{exc.msg} at character {exc.pos}", code="invalid_header"
        ) from None
    if not isinstance(obj, dict):
        raise header_error(
            path,
            "the header is not a JSON object",
            f"it is a JSON {type(obj).__name__}",
            code="invalid_header",
        )
    return obj


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


def read_header(path: str | os.PathLike[str], *, cap: int = HEADER_SIZE_CAP) -> SafetensorsHeader:
    """Read and fully validate the header of a safetensors file. Never reads tensor data."""
    p = Path(path)
    with open_input(p) as fh:
        size = os.fstat(fh.fileno()).st_size
        return read_header_from(fh, p, size, cap=cap)


def _map(fileno: int, size: int, name: str) -> tuple[mmap.mmap, bool]:
    """Copy-on-write when the kernel allows it; read-only shared otherwise.

    A private writable mapping is charged in full against the kernel's commit limit, so a file
    larger than RAM + swap (a 22 GiB Flux on a 16 GiB machine) cannot be mapped that way. A
    read-only shared mapping is not charged: pages come and go with the page cache. A file larger
    than the address space the process may use (``ulimit -v``) is refused in words, unread.
    """
    try:
        return mmap.mmap(fileno, size, access=mmap.ACCESS_COPY), True
    except OSError as exc:
        if exc.errno != errno.ENOMEM:
            raise
    try:
        return mmap.mmap(fileno, size, access=mmap.ACCESS_READ), False
    except OSError as exc:
        if exc.errno != errno.ENOMEM:
            raise
        raise _unmappable(name, size) from None


def _unmappable(name: str, size: int) -> LoadoutError:
    """A file larger than the address space this process may map (nothing of it was read)."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0] if resource is not None else -1
    gib = f"{size / (1 << 30):,.1f} GiB"
    if limit not in (-1, getattr(resource, "RLIM_INFINITY", -1)):
        why = (
            f"this process may map at most {limit / (1 << 30):,.1f} GiB (its address-space limit, ulimit -v)"
        )
        fix = "Raise the limit (ulimit -v), or use a smaller file"
    else:
        why = "the system has no room to map it"
        fix = "Close other programs, or use a smaller file"
    return LoadoutError(
        f"{name} ({gib}) cannot be mapped into memory to read it", why=why, fix=fix, code="out_of_memory"
    )


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
        self._fh = open_input(self.path)  # lives as long as the mapping
        if os.fstat(self._fh.fileno()).st_size != self.header.file_size:  # rewritten since: read again
            self.header = read_header(self.path)
        size = self.header.file_size
        self._mmap: mmap.mmap | None = None
        #: False when the file had to be mapped read-only (see _map): its tensors must never be
        #: written in place. Loadout never does: patches and casts always make new tensors.
        self.writable = True
        if size > 0:
            self._mmap, self.writable = _map(self._fh.fileno(), size, self.path.name)

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

    def drop_pages(self, name: str) -> None:
        """Give back the mapped pages of ``name``'s data (and of any page it shares with a
        neighbour): they leave this process's resident memory and are read again from the file if
        touched. For readers that stream a file once (a merge): a page changed in place would lose
        its change, and Loadout never changes a mapped tensor in place."""
        if self._mmap is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        _, _, start, count = self._locate(name)
        begin = start - start % mmap.PAGESIZE
        end = min(len(self._mmap), start + count)
        if end > begin:
            self._mmap.madvise(mmap.MADV_DONTNEED, begin, end - begin)

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
            with open_input(self.path) as fh:
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
