"""Pictures dropped on a box that takes them (the control picture, the reference slots): which
dragged files are pictures Loadout reads, by their ending."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QDragEnterEvent, QDropEvent

SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


def offers_pictures(event: QDragEnterEvent) -> bool:
    """Whether any dragged file is a picture."""
    return any(u.toLocalFile().lower().endswith(SUFFIXES) for u in event.mimeData().urls())


def dropped_pictures(event: QDropEvent) -> list[Path]:
    """The dropped local files that are pictures, in order."""
    files = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
    return [f for f in files if f.name.lower().endswith(SUFFIXES)]
