"""Validating a safetensors header: the parsed JSON object becomes a :class:`SafetensorsHeader`, or
a :class:`FileFormatError` that names the entry at fault and what is wrong with it.

Reading the bytes and parsing the JSON is :func:`core.files.safetensors.read_header_from`'s part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import FileFormatError
from core.files.dtypes import DTYPES, nbytes_for
from core.files.tensor_info import TensorInfo

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


def header_error(
    path: Path, what: str, why: str, *, code: str = "invalid_file", fix: str = ""
) -> FileFormatError:
    return FileFormatError(
        f"{path.name} is not a valid safetensors file: {what}",
        why=why,
        fix=fix or _FIX_REDOWNLOAD,
        code=code,
    )


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
        return header_error(
            path, f"the entry for tensor {name!r} is not an object", "", code="invalid_header"
        )
    dtype_name = entry.get("dtype")
    dt = DTYPES.get(dtype_name) if type(dtype_name) is str else None
    if dt is None:
        return header_error(
            path,
            f"tensor {name!r} has unknown dtype {dtype_name!r}",
            "known dtypes are " + ", ".join(DTYPES),
            code="unknown_dtype",
            fix="If the file is new, update Loadout; otherwise the file is damaged",
        )
    shape: Any = entry.get("shape")
    numel = _numel(shape)
    if numel < 0:
        return header_error(
            path,
            f"tensor {name!r} has an invalid shape {shape!r}",
            "a shape is a list of non-negative integers",
            code="invalid_shape",
        )
    offs = entry.get("data_offsets")
    if type(offs) is not list or len(offs) != 2 or type(offs[0]) is not int or type(offs[1]) is not int:
        return header_error(
            path,
            f"tensor {name!r} has invalid data_offsets {offs!r}",
            "data_offsets is a list of two integers [begin, end]",
            code="invalid_offsets",
        )
    begin, end = offs
    expected = nbytes_for(dt, numel)
    if begin < 0 or end < begin:
        return header_error(
            path,
            f"tensor {name!r} has data_offsets {offs}",
            "begin must be >= 0 and <= end",
            code="invalid_offsets",
        )
    if end - begin != expected:
        return header_error(
            path,
            f"tensor {name!r} spans {end - begin:,} bytes but its shape {tuple(shape)} "
            f"of {dt.name} needs {expected:,}",
            "the header does not match its data",
            code="invalid_offsets",
        )
    if end > data_size:
        return header_error(
            path,
            f"tensor {name!r} ends at byte {end:,} of a {data_size:,}-byte data area",
            "the file is truncated",
            code="truncated",
        )
    return header_error(
        path, f"the entry for tensor {name!r} is malformed", repr(entry)[:200], code="invalid_header"
    )


def validate_header(path: Path, obj: dict[str, Any], data_start: int, file_size: int) -> SafetensorsHeader:
    """The header of ``path`` from its JSON object (``__metadata__`` is popped from it)."""
    warnings: list[str] = []
    metadata = _metadata(path, obj.pop("__metadata__", None), warnings)
    data_size = file_size - data_start
    tensors, offsets = _entries(path, obj, data_size)
    _check_packed(path, offsets, data_size, warnings)
    return SafetensorsHeader(path, tensors, offsets, metadata, data_start, file_size, warnings)


def _metadata(path: Path, raw_meta: Any, warnings: list[str]) -> dict[str, str]:
    """``__metadata__`` as strings; a value that is not one is shown as JSON, with a warning."""
    metadata: dict[str, str] = {}
    if raw_meta is None:
        return metadata
    if not isinstance(raw_meta, dict):
        raise header_error(
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
    return metadata


def _entries(
    path: Path, obj: dict[str, Any], data_size: int
) -> tuple[dict[str, TensorInfo], dict[str, tuple[int, int]]]:
    """Each tensor entry checked: known dtype, valid shape, offsets that match it and fit the data."""
    tensors: dict[str, TensorInfo] = {}
    offsets: dict[str, tuple[int, int]] = {}
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
    return tensors, offsets


def _check_packed(
    path: Path, offsets: dict[str, tuple[int, int]], data_size: int, warnings: list[str]
) -> None:
    """In order, no overlap, no gaps (the reference implementation's rule). Zero-size tensors
    may sit anywhere; unused bytes after the last tensor are a warning."""
    spans = sorted((b, e, n) for n, (b, e) in offsets.items() if e > b)
    cursor = 0
    for b, e, n in spans:
        if b < cursor:
            raise header_error(
                path,
                f"tensor {n!r} overlaps the tensor before it",
                f"it starts at byte {b:,}, inside data that ends at {cursor:,}",
                code="invalid_offsets",
            )
        if b > cursor:
            raise header_error(
                path,
                f"there is a gap of {b - cursor:,} bytes before tensor {n!r}",
                "tensor data must be packed back to back",
                code="invalid_offsets",
            )
        cursor = e
    if cursor < data_size:
        warnings.append(f"{data_size - cursor:,} bytes of unused data after the last tensor")
