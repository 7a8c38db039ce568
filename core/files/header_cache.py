"""Validated safetensors tensor indexes, remembered by structure.

A library holds many files with the same structure: fine-tunes of one base saved by one tool,
LoRAs of one trainer at one rank. Their headers differ only in ``__metadata__``; the tensor entries
(names, dtypes, shapes, offsets) are the same text. Parsing and validating thousands of entries is
most of what reading a header costs, so the validated entries are kept here, keyed by

* a digest of the header text with the metadata object cut out (and the JSON padding stripped), and
* the size of the data area (the file size less the header): validation checks every tensor
  against it and reports the bytes left over.

Two headers with the same key have the same tensors and give the same validation verdict, so a
hit returns exactly what a full read would; only the metadata object is parsed (it is checked to be
an object of strings; anything else goes the full way, which explains or converts it). The key
(``structure``) also lets detection reuse what depends on the shapes alone.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson

from core.files.tensor_info import TensorInfo
from core.lru import LruCache

#: (data area size, digest of the header without its metadata)
Structure = tuple[int, bytes]

#: How many structures are remembered (the largest, SDXL checkpoints, hold ~1 MB of entries).
CAPACITY = 64

_METADATA_KEY = b'"__metadata__"'
# JSON strings (escapes included) and braces: enough to find where an object ends.
_TOKENS = re.compile(rb'"(?:[^"\\]++|\\.)*+"|[{}]')
_SPACE = b" \t\r\n"


@dataclass(frozen=True)
class Split:
    """A header cut into its structure key and its metadata text."""

    structure: Structure
    metadata: bytes | None  # the metadata object's JSON text; None when the header has none


@dataclass(frozen=True)
class Entry:
    tensors: dict[str, TensorInfo]
    warnings: tuple[str, ...]


_entries: LruCache[Structure, Entry] = LruCache(CAPACITY)


def _object_end(raw: bytes, start: int) -> int:
    """The index just past the JSON object starting at ``raw[start]`` (a ``{``), or -1."""
    depth = 0
    for m in _TOKENS.finditer(raw, start):
        tok = m.group()
        if tok == b"{":
            depth += 1
        elif tok == b"}":
            depth -= 1
            if depth == 0:
                return m.end()
    return -1


def split(raw: bytes, data_size: int) -> Split | None:
    """The structure key and metadata text of a header; None when the header is unusual (no
    metadata object where one is named, the name twice): those are read the full way."""
    at = raw.find(_METADATA_KEY)
    h = hashlib.blake2b(digest_size=16)
    if at < 0:
        h.update(raw.rstrip(_SPACE))
        return Split((data_size, h.digest()), None)
    if raw.find(_METADATA_KEY, at + 1) >= 0:
        return None
    start = at + len(_METADATA_KEY)
    while start < len(raw) and raw[start] in _SPACE:
        start += 1
    if raw[start : start + 1] != b":":
        return None
    start += 1
    while start < len(raw) and raw[start] in _SPACE:
        start += 1
    if raw[start : start + 1] != b"{":
        return None
    end = _object_end(raw, start)
    if end < 0:
        return None
    view = memoryview(raw)
    h.update(view[:start])
    h.update(raw[end:].rstrip(_SPACE))
    return Split((data_size, h.digest()), raw[start:end])


def parse_metadata(text: bytes | None) -> dict[str, str] | None:
    """The metadata object as a dict of strings; None when it is anything else (the full read
    then explains or converts it)."""
    if text is None:
        return {}
    try:
        obj: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not all(isinstance(v, str) for v in obj.values()):
        return None
    return obj


def get(structure: Structure) -> Entry | None:
    return _entries.get(structure)


def put(structure: Structure, tensors: dict[str, TensorInfo], warnings: tuple[str, ...]) -> None:
    """Remember a fully validated header's entries (its warnings must not be about metadata)."""
    _entries.put(structure, Entry(dict(tensors), warnings))


def clear() -> None:
    _entries.clear()
