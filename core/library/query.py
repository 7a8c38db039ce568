"""Search, filter, sort and group library entries: pure functions over lists of :class:`Entry`."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.library.entry import Entry

SortKey = Literal["name", "date", "size", "family", "kind"]
#: Kinds in the order the browser shows their groups.
KIND_ORDER = (
    "checkpoint",
    "diffusion_model",
    "lora",
    "vae",
    "text_encoder",
    "controlnet",
    "upscale_model",
    "embedding",
    "unknown",
)
_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Case-insensitive, numbers by value: ``lora_v2`` before ``lora_v10``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name.casefold()))


def _haystack(entry: Entry) -> str:
    parts = [entry.name, entry.family or "", entry.title or "", *entry.trigger_words]
    return "\n".join(parts).casefold()


def search(entries: Iterable[Entry], text: str) -> list[Entry]:
    """Entries whose name, family, title or trigger words contain every word of ``text``
    (case-insensitive); a quoted phrase is one word. Empty text matches everything."""
    words = [w.casefold() for w in _words(text)]
    return [e for e in entries if all(w in _haystack(e) for w in words)]


def _words(text: str) -> list[str]:
    words: list[str] = []
    for quoted, plain in re.findall(r'"([^"]*)"|(\S+)', text):
        word = quoted if quoted else plain
        if word.strip():
            words.append(word)
    return words


def filter_entries(
    entries: Iterable[Entry],
    *,
    kinds: Collection[str] | None = None,
    families: Collection[str | None] | None = None,
    statuses: Collection[str] | None = None,
    origins: Collection[str] | None = None,
) -> list[Entry]:
    """Entries matching every given criterion (None: any). Kinds match pending entries by their
    folder's guess (:attr:`Entry.group_kind`), so a filtered view fills in without flicker."""
    out: list[Entry] = []
    for e in entries:
        if kinds is not None and e.group_kind not in kinds:
            continue
        if families is not None and e.family not in families:
            continue
        if statuses is not None and e.status not in statuses:
            continue
        if origins is not None and e.origin not in origins:
            continue
        out.append(e)
    return out


def sort_entries(entries: Iterable[Entry], by: SortKey = "name", *, descending: bool = False) -> list[Entry]:
    """Sorted by ``by``; ties (and files without a family, which go last) by name, then path.

    ``descending`` reverses the main key only: ties stay in name order, unknown families last.
    """
    items = list(entries)
    items.sort(key=lambda e: (natural_key(e.name), str(e.path)))
    if by == "name":
        return items[::-1] if descending else items
    if by == "date":
        items.sort(key=lambda e: e.mtime_ns, reverse=descending)
    elif by == "size":
        items.sort(key=lambda e: e.size, reverse=descending)
    elif by == "family":
        known = [e for e in items if e.family is not None]
        known.sort(key=lambda e: e.family or "", reverse=descending)
        return known + [e for e in items if e.family is None]
    elif by == "kind":
        rank = {k: i for i, k in enumerate(KIND_ORDER)}
        items.sort(key=lambda e: rank.get(e.group_kind, len(rank)), reverse=descending)
    else:
        raise ValueError(f"cannot sort by {by!r}; use one of name, date, size, family, kind")
    return items


@dataclass(frozen=True)
class FolderKey:
    """A folder of the browser's tree: the root it is under and its path inside it."""

    origin: str
    root: Path
    folder: str

    @property
    def label(self) -> str:
        return str(self.root / self.folder) if self.folder else str(self.root)


def group_by_folder(entries: Iterable[Entry]) -> dict[FolderKey, list[Entry]]:
    """Entries per folder, folders in the order they are first met (listing order)."""
    groups: dict[FolderKey, list[Entry]] = {}
    for e in entries:
        groups.setdefault(FolderKey(e.origin, e.root, e.folder), []).append(e)
    return groups


def group_by_kind(entries: Iterable[Entry]) -> dict[str, list[Entry]]:
    """Entries per kind (:attr:`Entry.group_kind`), kinds in :data:`KIND_ORDER`."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.group_kind, []).append(e)
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    return dict(sorted(groups.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
