"""Search, filter, sort and group library entries: pure functions over lists of :class:`Entry`."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.detect.catalog import lora_fits
from core.library.entry import Entry

SortKey = Literal["name", "date", "size", "family", "kind", "last_used"]
#: Kinds in the order the browser shows their groups.
KIND_ORDER = (
    "checkpoint",
    "diffusion_model",
    "lora",
    "vae",
    "text_encoder",
    "controlnet",
    "upscale_model",
    "preprocessor_model",
    "image_encoder",
    "ip_adapter",
    "style_model",
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
    fits: str | None = None,
    paths: Collection[str] | None = None,
) -> list[Entry]:
    """Entries matching every given criterion (None: any). Kinds match pending entries by their
    folder's guess (:attr:`Entry.group_kind`), so a filtered view fills in without flicker.
    ``fits`` (a model family) hides LoRAs made for models it does not take (family records'
    ``lora_group``); other kinds, and LoRAs of unknown base, stay. ``paths`` keeps only those."""
    out: list[Entry] = []
    for e in entries:
        if fits is not None and e.kind == "lora" and not lora_fits(e.family, fits):
            continue
        if paths is not None and str(e.path) not in paths:
            continue
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
    elif by == "last_used":  # most recent first when descending; never used last either way
        used = [e for e in items if e.last_used is not None]
        used.sort(key=lambda e: e.last_used or 0.0, reverse=descending)
        return used + [e for e in items if e.last_used is None]
    elif by == "kind":
        rank = {k: i for i, k in enumerate(KIND_ORDER)}
        items.sort(key=lambda e: rank.get(e.group_kind, len(rank)), reverse=descending)
    else:
        raise ValueError(f"cannot sort by {by!r}; use one of name, date, size, family, kind, last_used")
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


# -- duplicates and disk usage ---------------------------------------------------------------------


@dataclass(frozen=True)
class Duplicate:
    """Other copies of one file's data. ``confirmed``: same SHA-256; otherwise only the same size
    while a hash is missing (a *possible* duplicate). ``wasted``: the bytes the whole group takes
    beyond one copy (hard links to one file count once: they waste nothing)."""

    confirmed: bool
    others: tuple[Path, ...]
    wasted: int


def _distinct(entries: list[Entry]) -> int:
    """How many separate files (not hard links of one) ``entries`` are."""
    ids = {e.file_id if e.file_id is not None else ("path", str(e.path)) for e in entries}
    return len(ids)


def find_duplicates(entries: Iterable[Entry]) -> dict[str, Duplicate]:
    """Per path, the other copies of its data: confirmed by SHA-256, or possible (same size, not
    all of them hashed yet). Hard links of one file are not duplicates of each other."""
    items = [e for e in entries if e.size > 0]
    out: dict[str, Duplicate] = {}
    by_hash: dict[tuple[str, int], list[Entry]] = {}
    for e in items:
        if e.sha256 is not None:  # copies have the same size too: a hash alone may be a bad cache row
            by_hash.setdefault((e.sha256, e.size), []).append(e)
    for group in by_hash.values():
        copies = _distinct(group)
        if copies < 2:
            continue
        wasted = (copies - 1) * group[0].size
        for e in group:
            out[str(e.path)] = Duplicate(True, tuple(o.path for o in group if o is not e), wasted)
    by_size: dict[int, list[Entry]] = {}
    for e in items:
        if str(e.path) not in out:
            by_size.setdefault(e.size, []).append(e)
    for group in by_size.values():
        if _distinct(group) < 2 or all(e.sha256 is not None for e in group):
            continue
        for e in group:
            others = [o for o in group if o is not e and (o.sha256 is None or e.sha256 is None)]
            if others:
                out[str(e.path)] = Duplicate(False, tuple(o.path for o in others), 0)
    return out


def wasted_bytes(duplicates: dict[str, Duplicate], entries: Iterable[Entry]) -> int:
    """Bytes confirmed duplicates take beyond one copy each (each group counted once)."""
    groups = {
        (e.sha256, e.size): d.wasted for e in entries if (d := duplicates.get(str(e.path))) and d.confirmed
    }
    return sum(groups.values())


@dataclass(frozen=True)
class Usage:
    files: int
    bytes: int


def disk_usage(entries: Iterable[Entry], by: Literal["root", "folder", "kind"]) -> dict[str, Usage]:
    """Files and bytes on disk per configured root folder, per folder or per kind; a file reached
    through several hard links or paths counts once in each total."""
    seen: dict[str, set[object]] = {}
    totals: dict[str, list[int]] = {}
    for e in entries:
        if by == "root":
            key = str(e.root)
        elif by == "folder":
            key = str(e.root / e.folder) if e.folder else str(e.root)
        else:
            key = e.group_kind
        ident = e.file_id if e.file_id is not None else str(e.path)
        if ident in seen.setdefault(key, set()):
            continue
        seen[key].add(ident)
        t = totals.setdefault(key, [0, 0])
        t[0] += 1
        t[1] += e.size
    return {k: Usage(v[0], v[1]) for k, v in totals.items()}
