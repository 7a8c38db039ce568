"""Hugging Face / diffusers models split into shards, read as ONE model.

``model-00001-of-00004.safetensors`` ... ``model-00004-of-00004.safetensors`` beside
``model.safetensors.index.json`` (``{"weight_map": {key: shard file name}}``; diffusers names them
``diffusion_pytorch_model-0000N-of-0000M.safetensors``) are one model: any shard or the index json
stands for all of them. The index json, when present, says which shard holds each key; without it
the numbered files 1..M are the shards. A missing shard, a key the index places in a shard that
does not hold it, or a shard holding keys the index does not place there is refused before any
data is read, naming the shard.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from core.errors import FileAccessError, FileFormatError
from core.files.leases import read_input

SHARD_NAME: Final = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.safetensors$", re.IGNORECASE)
INDEX_SUFFIX: Final = ".safetensors.index.json"


@dataclass(frozen=True)
class ShardSet:
    """The shards of one model, in order, and the index json's key -> shard (None without one)."""

    shards: tuple[Path, ...]
    index_json: Path | None
    weight_map: dict[str, Path] | None

    @property
    def first(self) -> Path:
        return self.shards[0]


def is_later_shard(name: str) -> bool:
    """Whether ``name`` is shard 2..M of a split model (the library lists shard 1 only)."""
    m = SHARD_NAME.match(name)
    return m is not None and int(m["i"]) > 1


def _numbered(folder: Path, stem: str, n: int, width_name: str) -> list[Path]:
    ext = width_name[width_name.lower().rindex(".safetensors") :]
    return [folder / f"{stem}-{i:05d}-of-{n:05d}{ext}" for i in range(1, n + 1)]


def _missing(path: Path, total: int, index_json: Path | None) -> FileAccessError:
    told = f" ({index_json.name} names it)" if index_json is not None else ""
    return FileAccessError(
        f"{path.name} is missing: the model is split into {total} files and this one is not there{told}",
        why=f"a split model needs every shard in {path.parent}",
        fix=f"download {path.name} again into that folder (the model's other shards are there)",
        code="missing_file",
    )


def _read_index(index_json: Path) -> dict[str, Path]:
    try:
        raw = json.loads(read_input(index_json))
        mapping = raw["weight_map"]
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise TypeError("weight_map is not {key: file name}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FileFormatError(
            f"{index_json.name} is not a readable shard index",
            why=f"{type(exc).__name__}: {exc}"[:300],
            fix="download the model's index json again",
            code="invalid_header",
        ) from exc
    folder = index_json.parent
    bad = sorted({v for v in mapping.values() if Path(v).name != v})
    if bad:
        raise FileFormatError(
            f"{index_json.name} places weights outside its folder ({bad[0]})",
            why="a shard index names files beside it",
            fix="download the model's index json again",
            code="invalid_header",
        )
    return {k: folder / v for k, v in mapping.items()}


def shard_set(path: Path) -> ShardSet | None:
    """The shards ``path`` belongs to (``path``: a shard or an index json); None for a plain file."""
    if path.name.lower().endswith(INDEX_SUFFIX):
        index_json: Path | None = path
        weight_map: dict[str, Path] | None = _read_index(path)
        assert weight_map is not None
        shards = sorted(set(weight_map.values()), key=lambda p: p.name)
        if not shards:
            raise FileFormatError(
                f"{path.name} names no shards", fix="download it again", code="invalid_header"
            )
        m = SHARD_NAME.match(shards[0].name)
        total = int(m["n"]) if m else len(shards)
    else:
        m = SHARD_NAME.match(path.name)
        if m is None:
            return None
        total = int(m["n"])
        shards = _numbered(path.parent, m["stem"], total, path.name)
        index_json = path.with_name(m["stem"] + INDEX_SUFFIX)
        weight_map = _read_index(index_json) if index_json.is_file() else None
        if weight_map is None:
            index_json = None
        else:
            shards = sorted(set(weight_map.values()) | {path}, key=lambda p: p.name)
    for shard in shards:
        if not shard.is_file():
            raise _missing(shard, total, index_json)
    return ShardSet(tuple(shards), index_json, weight_map)


def check_placement(shards: ShardSet, keys_by_shard: dict[Path, set[str]]) -> None:
    """Refuse shards whose keys are not where the index json places them (mixed downloads)."""
    if shards.weight_map is None:
        return
    for shard, keys in keys_by_shard.items():
        placed = {k for k, p in shards.weight_map.items() if p == shard}
        absent, extra = sorted(placed - keys), sorted(keys - placed)
        if absent or extra:
            what = f"lacks {absent[0]}" if absent else f"holds {extra[0]}, which the index places elsewhere"
            assert shards.index_json is not None
            raise FileFormatError(
                f"{shard.name} does not match {shards.index_json.name}: it {what}",
                why=f"{len(absent)} key(s) missing and {len(extra)} unexpected: the shards may come from "
                "different downloads or versions",
                fix=f"download {shard.name} again (or the whole model)",
                code="invalid_file",
            )


def expand_shards(paths: Iterable[Path | None]) -> list[Path | None]:
    """``paths`` with each split model's path replaced by all its files (the shards and the index
    json), for the holders that lease every mapped file; a set that cannot be read stays as given
    (its loader says what is wrong)."""
    out: list[Path | None] = []
    for path in paths:
        found = None
        if path is not None and (SHARD_NAME.match(path.name) or path.name.lower().endswith(INDEX_SUFFIX)):
            try:
                found = shard_set(path)
            except (FileAccessError, FileFormatError):
                found = None
        if found is None:
            out.append(path)
        else:
            out += [*found.shards, *([found.index_json] if found.index_json is not None else [])]
    return out
