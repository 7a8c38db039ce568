"""Writing safetensors files atomically and without doubling memory.

Tensors are streamed one at a time into a temporary file beside the target, which is flushed,
fsynced and renamed over the target only when everything was written. A crash, an interrupt or a
full disk leaves the target as it was (absent or the old file) and removes the temporary file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from core.errors import FileAccessError, LoadoutError
from core.files.atomic import atomic_file, write_error
from core.files.destination import check_output_file
from core.files.dtypes import name_of_torch_dtype

#: The data area starts at a multiple of this many bytes (the header is padded with spaces, which
#: the format allows): every tensor whose offset is a multiple of 64 is then 64-byte aligned in a
#: mapping, the alignment CPU kernels prefer. Not needed for correct results (``core.ops.alignment``).
DATA_ALIGN = 64


@dataclass(frozen=True)
class WriteProgress:
    tensors_done: int
    tensors_total: int
    bytes_done: int
    bytes_total: int


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _raw(t: torch.Tensor) -> memoryview:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy().data)


def header_dtype(header: Mapping[str, object], name: str) -> str:
    entry = header[name]
    assert isinstance(entry, dict)
    return str(entry["dtype"])


def refuse_same_file(out: Path, *inputs: Path) -> None:
    """Raise when ``out`` is one of ``inputs`` (same file, even through a link)."""
    for inp in inputs:
        try:
            same = out.exists() and os.path.samefile(out, inp)
        except OSError:
            same = False
        if same or out.resolve() == inp.resolve():
            raise FileAccessError(
                f"the output {out} is the input file",
                why="writing over a model while reading it would destroy it",
                fix="Choose another output name",
                code="output_is_input",
            )


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None = None,
    *,
    progress: Callable[[WriteProgress], None] | None = None,
    check: Callable[[], None] | None = None,
    specs: Mapping[str, tuple[torch.dtype, tuple[int, ...]]] | None = None,
) -> Path:
    """Write ``tensors`` to ``path`` atomically. ``check`` is called between tensors (it raises
    to stop, e.g. on interrupt); ``progress`` is told after each tensor.

    ``tensors`` may compute each tensor on access (a cast, a merge): give ``specs`` (dtype and
    shape per name) and each tensor is then produced exactly once, while it is written."""
    out = Path(path)
    names = list(tensors)
    header, sizes, data_size = _header(names, tensors, metadata, specs)
    raw_header = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw_header += b" " * ((-(8 + len(raw_header))) % DATA_ALIGN)
    _check_space(out, 8 + len(raw_header) + data_size)
    with atomic_file(out) as fh:
        fh.write(len(raw_header).to_bytes(8, "little"))
        fh.write(raw_header)
        done = 0
        for i, name in enumerate(names):
            if check is not None:
                check()
            t = tensors[name]
            if _nbytes(t) != sizes[name] or name_of_torch_dtype(t.dtype) != header_dtype(header, name):
                raise ValueError(f"tensor {name!r} does not match its announced dtype and shape")
            fh.write(_raw(t))
            done += sizes[name]
            if progress is not None:
                progress(WriteProgress(i + 1, len(names), done, data_size))
    return out


def _header(
    names: list[str],
    tensors: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None,
    specs: Mapping[str, tuple[torch.dtype, tuple[int, ...]]] | None,
) -> tuple[dict[str, object], dict[str, int], int]:
    """The header object (tensors back to back in ``names`` order), each tensor's byte count and
    the size of the data area."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    sizes: dict[str, int] = {}
    for name in names:
        if specs is not None:
            dtype, shape = specs[name]
        else:
            t = tensors[name]
            dtype, shape = t.dtype, tuple(t.shape)
        n = math.prod(shape) * dtype.itemsize
        sizes[name] = n
        header[name] = {
            "dtype": name_of_torch_dtype(dtype),
            "shape": list(shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    return header, sizes, offset


def _check_space(out: Path, total: int) -> None:
    """The output's folder is made; there must be room for ``total`` bytes on its disk."""
    check_output_file(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(out.parent).free
    except OSError as exc:
        raise write_error(out, exc) from None
    if free < total:
        raise LoadoutError(
            f"not enough disk space to write {out.name}",
            why=f"it needs {total / 1e9:.2f} GB and {free / 1e9:.2f} GB are free on that disk",
            fix="Free some space or choose another folder",
            code="disk_full",
        )
