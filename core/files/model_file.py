"""One entry point for "what tensors does this file hold?", whatever its format.

The format is decided by the file's first bytes, not its extension (a ``.sft`` or a misnamed
``.ckpt`` that is really safetensors is read as safetensors).
"""

from __future__ import annotations

import io
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import FileAccessError, FileFormatError
from core.files import header_cache
from core.files import safetensors as st_format
from core.files.gguf import read_gguf_header, t5_transformers_names
from core.files.gguf_llm import gguf_plus_one_keys, gguf_qk_heads, llm_transformers_names
from core.files.leases import not_a_file, open_input, special_kind, unreadable
from core.files.pickle_safe import read_pickle_index
from core.files.safetensors import HEADER_SIZE_CAP, SafetensorsHeader, read_header
from core.files.shards import INDEX_SUFFIX, SHARD_NAME, ShardSet, check_placement, shard_set
from core.files.tensor_info import TensorInfo

MODEL_EXTENSIONS = (".safetensors", ".sft", ".ckpt", ".pt", ".pth", ".bin", ".gguf")


@dataclass
class TensorIndex:
    """Every tensor's name, dtype and shape, plus the file's metadata."""

    path: Path
    format: str  # "safetensors" | "pickle" | "gguf"
    file_size: int
    tensors: dict[str, TensorInfo]
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the parsed safetensors header this index came from (loading maps the file with it, so a
    #: load parses the header once); None when the index came from the layout cache
    header: SafetensorsHeader | None = field(default=None, repr=False, compare=False)
    #: For safetensors: a key equal for files whose tensor entries are the same (see
    #: ``core.files.header_cache``); detection reuses what depends on shapes alone. None otherwise.
    structure: header_cache.Structure | None = None


def _describe_magic(head: bytes) -> str:
    if head.startswith(b"\x89PNG"):
        return "it is a PNG image"
    if head.startswith(b"\xff\xd8\xff"):
        return "it is a JPEG image"
    if head.startswith((b"<!DOCTYPE", b"<html", b"<HTML")):
        return "it is a web page (often a download that returned an error page)"
    if head.startswith(b"version https://git-lfs"):
        return "it is a Git LFS pointer, not the model itself"
    try:
        head.decode("utf-8")
        return "it is a text file"
    except UnicodeDecodeError:
        return "its contents are not a known model format"


def sniff_format(path: Path, head: bytes, size: int) -> str | None:
    """'safetensors', 'pickle', 'gguf', or None, from the first bytes of the file."""
    if head.startswith(b"GGUF"):
        return "gguf"
    if head.startswith(b"PK\x03\x04"):
        return "pickle"
    if len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle"
    # Named safetensors: let its reader explain what is wrong when the file is too short to
    # tell, or when the length prefix is plausible (a header that is not a JSON object).
    named_st = path.suffix.lower() in (".safetensors", ".sft")
    if named_st and (size < 9 or 8 + int.from_bytes(head[:8], "little") <= size):
        return "safetensors"
    return None


def _check_path(p: Path) -> os.stat_result:
    try:
        st = p.stat()
    except FileNotFoundError:
        raise FileAccessError(
            f"{p} does not exist",
            why="no file or folder has that name",
            fix="Check the path, or rescan the library",
            code="not_found",
        ) from None
    except OSError as exc:
        raise unreadable(p, exc) from None
    if stat.S_ISDIR(st.st_mode):
        raise _folder_error(p)
    kind = special_kind(st)
    if kind is not None:
        raise not_a_file(p, kind)
    return st


def _folder_error(p: Path) -> FileAccessError:
    """A folder given where a model file goes: name the model files it holds, if any."""
    try:
        names = sorted(e.name for e in os.scandir(p) if e.name.lower().endswith(MODEL_EXTENSIONS) and
                       not e.name.startswith(".") and e.is_file())  # fmt: skip
    except OSError:
        names = []
    if not names:
        return FileAccessError(
            f"{p} is a folder with no model files in it",
            why="a model is a single file (" + ", ".join(MODEL_EXTENSIONS) + ")",
            fix="Pick a model file",
            code="is_directory",
        )
    shown = ", ".join(str(p / n) for n in names[:8]) + (
        f" and {len(names) - 8} more" if len(names) > 8 else ""
    )
    return FileAccessError(
        f"{p} is a folder, not a model file",
        why=f"it holds {len(names)} model file{'s' if len(names) > 1 else ''}: {shown}",
        fix="Pick one of them",
        code="is_directory",
    )


def read_tensor_index(path: str | os.PathLike[str]) -> TensorIndex:
    """Read a model file's tensor index from its header. Raises a LoadoutError on bad input. A shard
    of a split model (or its index json) gives the whole model's index (``core.files.shards``)."""
    p = Path(path)
    st = _check_path(p)
    if SHARD_NAME.match(p.name) or p.name.lower().endswith(INDEX_SUFFIX):
        shards = shard_set(p)
        if shards is not None:
            return _read_sharded(p, shards)
    try:
        with open_input(p) as fh:
            head = fh.read(64)
    except OSError as exc:
        raise FileAccessError(
            f"{p} cannot be read",
            why=exc.strerror or str(exc),
            fix="Check the file's permissions",
            code="unreadable",
        ) from None
    fmt = sniff_format(p, head, st.st_size)
    if fmt is None:
        if st.st_size == 0:
            raise FileFormatError(
                f"{p.name} is empty",
                why="it has 0 bytes",
                fix="The download or copy did not finish; get the file again",
                code="empty_file",
            )
        raise FileFormatError(
            f"{p.name} is not a model file",
            why=_describe_magic(head),
            fix="Pick a .safetensors, .ckpt/.pt or .gguf model file",
            code="not_a_model",
        )
    if fmt == "safetensors":
        return _read_safetensors(p, st.st_size)
    if fmt == "gguf":
        g = read_gguf_header(p)
        meta = {k: v for k, v in g.metadata.items() if not k.startswith("tokenizer.")}
        extra: dict[str, Any] = {"gguf_version": g.version}
        tensors = g.tensors
        arch = g.metadata.get("general.architecture")
        renamed = t5_transformers_names(tensors) or llm_transformers_names(list(tensors), arch)
        if renamed is not None:  # a T5 or LLM encoder under llama.cpp names: index it under its own
            tensors = {new: g.tensors[old] for new, old in renamed.items()}
            extra["gguf_names"] = renamed
            extra["gguf_plus_one"] = gguf_plus_one_keys(renamed, arch)
            extra["gguf_qk_heads"] = gguf_qk_heads(renamed, arch, g.metadata)
        return TensorIndex(p, fmt, st.st_size, tensors, meta, [], extra)
    idx = read_pickle_index(p)
    return TensorIndex(p, fmt, st.st_size, idx.tensors, {}, idx.warnings, idx.extra)


def _read_sharded(p: Path, shards: ShardSet) -> TensorIndex:
    """One index over every shard: ``extra["shards"]`` says which file holds each key."""
    tensors: dict[str, TensorInfo] = {}
    where: dict[str, Path] = {}
    keys_by_shard: dict[Path, set[str]] = {}
    parts: list[TensorIndex] = []
    for shard in shards.shards:
        part = _read_safetensors(shard, _check_path(shard).st_size)
        if part.format != "safetensors":  # pragma: no cover - _read_safetensors reads safetensors only
            raise FileFormatError(f"{shard.name} is not a safetensors shard", code="not_a_model")
        twice = next((k for k in part.tensors if k in tensors), None)
        if twice is not None:
            raise FileFormatError(
                f"{shard.name} and {where[twice].name} both hold {twice}",
                why="each weight of a split model is in exactly one shard",
                fix="remove the shard that does not belong to this model, or download the model again",
                code="invalid_file",
            )
        tensors.update(part.tensors)
        where.update(dict.fromkeys(part.tensors, shard))
        keys_by_shard[shard] = set(part.tensors)
        parts.append(part)
    check_placement(shards, keys_by_shard)
    return TensorIndex(
        p,
        "safetensors",
        sum(part.file_size for part in parts),
        tensors,
        dict(parts[0].metadata),
        [w for part in parts for w in part.warnings],
        {"shards": where, "shard_files": shards.shards},
    )


def _raw_header(p: Path, size: int) -> bytes | None:
    """The header's JSON bytes when they can be read plainly; None for anything the full read
    must explain (too short, a length over the cap or past the end)."""
    try:
        with open_input(p) as fh:
            prefix = fh.read(8)
            if len(prefix) != 8:
                return None
            (n,) = struct.unpack("<Q", prefix)
            if n > HEADER_SIZE_CAP or 8 + n > size:
                return None
            raw = fh.read(n)
    except OSError:
        return None
    return raw if len(raw) == n else None


def _read_safetensors(p: Path, size: int) -> TensorIndex:
    raw = _raw_header(p, size)
    if raw is None:
        h = read_header(p)  # raises the error that says what is wrong
        return TensorIndex(p, "safetensors", size, h.tensors, dict(h.metadata), list(h.warnings), header=h)
    cut = header_cache.split(raw, size - 8 - len(raw))
    meta = header_cache.parse_metadata(cut.metadata) if cut is not None else None
    if cut is not None and meta is not None:
        entry = header_cache.get(cut.structure)
        if entry is not None:
            tensors = dict(entry.tensors)
            return TensorIndex(
                p, "safetensors", size, tensors, meta, list(entry.warnings), structure=cut.structure
            )
    # The full read and validation, of the very bytes the key was made from.
    h = st_format.read_header_from(io.BytesIO(struct.pack("<Q", len(raw)) + raw), p, size)
    structure = None
    if cut is not None and meta is not None and meta == h.metadata:
        structure = cut.structure
        header_cache.put(structure, h.tensors, tuple(h.warnings))
    return TensorIndex(
        p, "safetensors", size, h.tensors, dict(h.metadata), list(h.warnings), header=h, structure=structure
    )
