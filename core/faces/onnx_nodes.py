"""The names of an ONNX graph's first nodes, read from the file's protobuf wire format (ModelProto
field 7 ``graph``, GraphProto field 1 ``node``, NodeProto field 3 ``name``) without the onnx
package: insightface tells whether an ArcFace graph normalises its own input by them."""

from __future__ import annotations

import mmap
from pathlib import Path

_GRAPH, _NODE, _NAME = 7, 1, 3


def _varint(buf: bytes | mmap.mmap, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, at


def _fields(buf: bytes | mmap.mmap, start: int, end: int) -> list[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field between ``start`` and ``end``."""
    out, at = [], start
    while at < end:
        key, at = _varint(buf, at)
        wire = key & 7
        if wire == 0:
            _, at = _varint(buf, at)
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            size, at = _varint(buf, at)
            out.append((key >> 3, at, at + size))
            at += size
        else:
            raise ValueError("not a protobuf message")
    return out


def first_node_names(path: Path, count: int = 8) -> tuple[str, ...]:
    """The names of the first ``count`` nodes of the ONNX graph in ``path`` (ValueError when the
    file is not one)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            graph = next((s, e) for n, s, e in _fields(buf, 0, len(buf)) if n == _GRAPH)
            names: list[str] = []
            at, end = graph
            while at < end and len(names) < count:
                key, at = _varint(buf, at)
                if key & 7 != 2:
                    raise ValueError("not an ONNX graph")
                size, at = _varint(buf, at)
                if key >> 3 == _NODE:
                    found = [bytes(buf[s:e]) for n, s, e in _fields(buf, at, at + size) if n == _NAME]
                    names.append(found[0].decode("utf-8", "replace") if found else "")
                at += size
        except (StopIteration, IndexError) as e:
            raise ValueError("not an ONNX graph") from e
    return tuple(names)
