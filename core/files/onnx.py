"""An ONNX file's signature (its graph's inputs and outputs: names and shapes) read from the file's
protobuf framing alone: the weights (initializers) and nodes are skipped by their lengths, never
decoded, so a 200 MB detector is recognised in milliseconds and without an ONNX runtime.

The fields read (ONNX's ``onnx.proto``): ModelProto ``ir_version`` (1) and ``graph`` (7); GraphProto
``initializer`` (5, only each TensorProto's ``name``, 8), ``input`` (11), ``output`` (12);
ValueInfoProto ``name`` (1), ``type`` (2); TypeProto ``tensor_type`` (1); its ``shape`` (2);
TensorShapeProto ``dim`` (1): ``dim_value`` (1) or ``dim_param`` (2). A graph input that is also an
initializer (files written with weights as inputs) is not an input.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import FileFormatError

#: a dimension: its size, or its symbolic name ("batch") when the graph leaves it open
Dim = int | str


@dataclass(frozen=True)
class OnnxTensor:
    name: str
    shape: tuple[Dim, ...]


@dataclass(frozen=True)
class OnnxSignature:
    inputs: tuple[OnnxTensor, ...]
    outputs: tuple[OnnxTensor, ...]

    def describe(self) -> str:
        """``images 1x3x640x640 -> output 1x8400x85``."""

        def one(t: OnnxTensor) -> str:
            return f"{t.name} {'x'.join(str(d) for d in t.shape) or 'scalar'}"

        return f"{', '.join(map(one, self.inputs))} -> {', '.join(map(one, self.outputs))}"


class _Corrupt(Exception):
    pass


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise _Corrupt
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


#: a field: (number, wire type, its varint value or its payload's (start, end))
Field = tuple[int, int, int, tuple[int, int]]


def _fields(buf: memoryview, start: int, end: int) -> Iterator[Field]:
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _Corrupt
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value, (pos, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise _Corrupt
            yield number, wire, 0, (pos, pos + length)
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise _Corrupt
        else:  # groups (3, 4) are not used by ONNX; anything else is not protobuf
            raise _Corrupt


def _text(buf: memoryview, span: tuple[int, int]) -> str:
    try:
        return bytes(buf[span[0] : span[1]]).decode("utf-8")
    except UnicodeDecodeError:
        raise _Corrupt from None


def _shape(buf: memoryview, span: tuple[int, int]) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for number, _w, _v, dim in _fields(buf, *span):
        if number != 1:
            continue
        size: Dim = "?"
        for n, wire, value, part in _fields(buf, *dim):
            if n == 1 and wire == 0:
                size = value
            elif n == 2 and wire == 2:
                size = _text(buf, part)
        dims.append(size)
    return tuple(dims)


def _value_info(buf: memoryview, span: tuple[int, int]) -> OnnxTensor:
    name, shape = "", tuple[Dim, ...]()
    for number, wire, _v, part in _fields(buf, *span):
        if number == 1 and wire == 2:
            name = _text(buf, part)
        elif number == 2 and wire == 2:
            for n, w, _x, tensor in _fields(buf, *part):
                if n == 1 and w == 2:
                    shape = next(
                        (_shape(buf, s) for k, ww, _y, s in _fields(buf, *tensor) if k == 2 and ww == 2), ()
                    )
    return OnnxTensor(name, shape)


def _graph(buf: memoryview, span: tuple[int, int]) -> OnnxSignature:
    inputs: list[OnnxTensor] = []
    outputs: list[OnnxTensor] = []
    weights: set[str] = set()
    for number, wire, _v, part in _fields(buf, *span):
        if wire != 2:
            continue
        if number == 5:
            weights.update(_text(buf, s) for n, w, _x, s in _fields(buf, *part) if n == 8 and w == 2)
        elif number == 11:
            inputs.append(_value_info(buf, part))
        elif number == 12:
            outputs.append(_value_info(buf, part))
    return OnnxSignature(tuple(t for t in inputs if t.name not in weights), tuple(outputs))


def read_onnx_signature(path: Path) -> OnnxSignature:
    """The graph's inputs and outputs of the ONNX file at ``path``; refused in words when the file
    is not a whole ONNX model (cut short, another format, no graph)."""
    path = Path(path)
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            buf = memoryview(mapped)
            try:
                fields = list(_fields(buf, 0, len(buf)))
                version = next((v for n, w, v, _s in fields if n == 1 and w == 0), None)
                graph = next((s for n, w, _v, s in fields if n == 7 and w == 2), None)
                signature = _graph(buf, graph) if graph is not None else None
            finally:
                buf.release()
    except ValueError:  # mmap of an empty file
        version, signature = None, None
    except _Corrupt:
        version, signature = None, None
    except OSError as exc:
        raise FileFormatError(
            f"{path.name} could not be read: {exc.strerror or exc}",
            fix="Check that the file exists and is readable",
        ) from None
    if version is None or signature is None or not signature.inputs or not signature.outputs:
        raise FileFormatError(
            f"{path.name} is not a whole ONNX model",
            why="its bytes do not hold an ONNX graph with inputs and outputs (the file is cut short, "
            "damaged, or of another format with an .onnx name)",
            fix="Download the file again",
        )
    return signature
