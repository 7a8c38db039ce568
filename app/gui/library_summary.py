"""The model browser's footer text: how many files, how many shown, still to read or unreadable, the
bytes on disk and what duplicates waste; its tooltip breaks the disk use down per folder and kind."""

from __future__ import annotations

from app.gui.library_model import KIND_TITLES
from app.gui.theme import human_bytes, kind_text
from core.library import Entry
from core.library.query import Duplicate, disk_usage, wasted_bytes


def summary_parts(entries: list[Entry], shown: int, duplicates: dict[str, Duplicate]) -> list[str]:
    """The footer's parts, joined with " · " by the browser (folder problems are added there)."""
    errors = sum(e.status == "error" for e in entries)
    pending = sum(e.status == "pending" for e in entries)
    parts = [f"{len(entries)} files"]
    if shown != len(entries):
        parts.append(f"{shown} shown")
    if pending:
        parts.append(f"{pending} to read")
    if errors:
        parts.append(f"{errors} unreadable")
    if entries:
        usage = disk_usage(entries, "root")
        parts.append(f"{human_bytes(sum(u.bytes for u in usage.values()))} on disk")
        wasted = wasted_bytes(duplicates, entries)
        if wasted:
            parts.append(f"{human_bytes(wasted)} in duplicates")
    return parts


def usage_text(entries: list[Entry]) -> str:
    """Bytes on disk per configured folder and per kind (hard links counted once)."""
    lines = ["Disk usage per folder:"]
    for root, u in sorted(disk_usage(entries, "root").items(), key=lambda kv: -kv[1].bytes):
        lines.append(f"  {root}: {human_bytes(u.bytes)} in {u.files} files")
    lines.append("Per kind:")
    for kind, u in sorted(disk_usage(entries, "kind").items(), key=lambda kv: -kv[1].bytes):
        lines.append(f"  {KIND_TITLES.get(kind, kind_text(kind))}: {human_bytes(u.bytes)} in {u.files} files")
    return "\n".join(lines)
