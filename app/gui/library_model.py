"""The browser's tree: library entries grouped by folder or by kind, searched, filtered and sorted.

A two-level Qt item model over plain :class:`~core.library.Entry` records, using core's own
search/filter/sort/group functions. Entries arrive in batches while the worker scans; a filled-in
entry that keeps its place is updated in place (one ``dataChanged``), anything that moves rows
schedules one debounced rebuild, so a folder of thousands of files fills in without stalls.
Duplicates (core's :func:`~core.library.query.find_duplicates`) are recomputed when a hash
arrives; a group row shows its folder's files and bytes on disk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import (
    QAbstractItemModel,
    QMimeData,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont

from app.gui.theme import human_bytes, icon, kind_icon, kind_text
from app.gui.thumbs import Thumbs
from core.library import Entry, filter_entries, group_by_folder, group_by_kind, search, sort_entries
from core.library.query import Duplicate, disk_usage, find_duplicates, natural_key

COLUMNS = ("Name", "Family", "Kind", "Size", "Dtype", "Copies", "Used")
COPIES_COLUMN = 5
KIND_TITLES = {
    "checkpoint": "Checkpoints",
    "diffusion_model": "Diffusion models",
    "lora": "LoRAs",
    "vae": "VAEs",
    "text_encoder": "Text encoders",
    "controlnet": "ControlNets",
    "upscale_model": "Upscalers",
    "preprocessor_model": "Preprocessors",
    "image_encoder": "Image encoders",
    "ip_adapter": "IP-Adapters",
    "style_model": "Style models",
    "embedding": "Embeddings",
    "unknown": "Unknown or unreadable",
}
ENTRY_ROLE = Qt.ItemDataRole.UserRole + 1
Index = QModelIndex | QPersistentModelIndex


@dataclass
class _Group:
    label: str
    tooltip: str
    icon_kind: str | None  # None: a folder
    rows: list[Entry] = field(default_factory=list)
    bytes: int = 0  # on disk, every file of the folder or kind (shown or filtered out)


class LibraryTreeModel(QAbstractItemModel):
    rebuilt = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._entries: dict[str, Entry] = {}
        self._groups: list[_Group] = []
        self._where: dict[str, tuple[int, int]] = {}
        self.grouping = "folder"
        self.search_text = ""
        self.kind: str | None = None
        self.family: str | None = None
        self.sort_key = "name"
        self.descending = False
        self.fits: str | None = None  # a model family: LoRAs for other models are hidden
        self.only_duplicates = False
        #: a narrow list: ".safetensors" left off the names (nearly every file has it; the
        #: tooltip, the details and the wide list keep it), so the names themselves have the room
        self.short_names = False
        self.duplicates: dict[str, Duplicate] = {}
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(120)
        self._timer.timeout.connect(self.rebuild)
        self.thumbs = Thumbs(parent=self)  # the files' preview pictures, decoded off the GUI thread
        self.thumbs.ready.connect(self._preview_ready)

    def _preview_ready(self, picture: str) -> None:
        for key, entry in self._entries.items():
            if entry.preview is not None and str(entry.preview) == picture and key in self._where:
                g, r = self._where[key]
                cell = self.index(r, 0, self.index(g, 0))
                self.dataChanged.emit(cell, cell, [Qt.ItemDataRole.DecorationRole])

    # -- feeding ---------------------------------------------------------------------------------
    def clear(self) -> None:
        self._entries.clear()
        self.rebuild()

    def add_entries(self, entries: list[Entry]) -> None:
        dirty = False
        hashes_changed = False
        for entry in entries:
            key = str(entry.path)
            old = self._entries.get(key)
            self._entries[key] = entry
            if old is None or (old.sha256, old.size) != (entry.sha256, entry.size):
                hashes_changed = True
            if old is not None and key in self._where and self._place(old) == self._place(entry):
                self._update_in_place(key, entry)
            elif old is None and not self._visible(entry):
                continue
            else:
                dirty = True
        if hashes_changed:
            dirty = self._update_duplicates() or dirty
        if dirty and not self._timer.isActive():
            self._timer.start()

    def _update_duplicates(self) -> bool:
        """Recompute duplicates; True when rows must move (the duplicates filter is on)."""
        found = find_duplicates(self._entries.values())
        if found == self.duplicates:
            return False
        changed = {k for k in set(found) | set(self.duplicates) if found.get(k) != self.duplicates.get(k)}
        self.duplicates = found
        if self.only_duplicates:
            return True
        for key in changed:
            where = self._where.get(key)
            if where is not None:
                parent = self.index(where[0], 0)
                cell = self.index(where[1], COPIES_COLUMN, parent)
                self.dataChanged.emit(cell, cell)
        return False

    def duplicate(self, entry: Entry | None) -> Duplicate | None:
        """The other copies of ``entry``'s data, if any (confirmed, or possible while unhashed)."""
        return self.duplicates.get(str(entry.path)) if entry is not None else None

    def remove_missing(self, keep: set[str]) -> None:
        """Drop entries whose files are gone from the last scan."""
        for key in [k for k in self._entries if k not in keep]:
            del self._entries[key]
        self.duplicates = find_duplicates(self._entries.values())
        self.rebuild()

    def _visible(self, entry: Entry) -> bool:
        return bool(self._filtered([entry]))

    def _place(self, entry: Entry) -> tuple[object, ...]:
        group = entry.group_kind if self.grouping == "kind" else (entry.root, entry.folder)
        sort_value = {
            "family": entry.family, "size": entry.size, "date": entry.mtime_ns, "last_used": entry.last_used
        }.get(self.sort_key)  # fmt: skip
        return group, self._visible(entry), sort_value

    def _update_in_place(self, key: str, entry: Entry) -> None:
        g, r = self._where[key]
        self._groups[g].rows[r] = entry
        self.dataChanged.emit(
            self.index(r, 0, self.index(g, 0)), self.index(r, len(COLUMNS) - 1, self.index(g, 0))
        )

    def _filtered(self, entries: list[Entry]) -> list[Entry]:
        out = search(entries, self.search_text) if self.search_text.strip() else entries
        kinds = None if self.kind is None else [self.kind]
        families = None if self.family is None else [self.family]
        paths = self.duplicates.keys() if self.only_duplicates else None
        if kinds is not None or families is not None or self.fits is not None or paths is not None:
            out = filter_entries(out, kinds=kinds, families=families, fits=self.fits, paths=paths)
        return out

    def set_view(self, **changes: Any) -> None:
        for name, value in changes.items():
            if not hasattr(self, name):
                raise AttributeError(name)
            setattr(self, name, value)
        self.rebuild()

    def rebuild(self) -> None:
        self._timer.stop()
        shown = sort_entries(
            self._filtered(list(self._entries.values())), self.sort_key, descending=self.descending
        )  # type: ignore[arg-type]
        groups: list[_Group] = []
        everything = list(self._entries.values())
        if self.grouping == "kind":
            usage = disk_usage(everything, "kind")
            for kind, rows in group_by_kind(shown).items():
                title = KIND_TITLES.get(kind, kind_text(kind))
                groups.append(_Group(title, kind, kind, rows, usage[kind].bytes))
        else:
            usage = disk_usage(everything, "folder")
            for key, rows in group_by_folder(shown).items():
                label = f"{key.root.name}/{key.folder}" if key.folder else key.root.name
                used = usage[key.label]
                tip = f"{key.label}\n({key.origin})\n{used.files} files, {human_bytes(used.bytes)} on disk"
                groups.append(_Group(label, tip, None, rows, used.bytes))
            groups.sort(key=lambda g: natural_key(g.label))
        self.beginResetModel()
        self._groups = groups
        self._where = {str(e.path): (g, r) for g, grp in enumerate(groups) for r, e in enumerate(grp.rows)}
        self.endResetModel()
        self.rebuilt.emit()

    # -- reading ---------------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def shown_count(self) -> int:
        return len(self._where)

    def families(self) -> list[str]:
        return sorted({e.family for e in self._entries.values() if e.family})

    def entry(self, index: Index) -> Entry | None:
        if not index.isValid() or index.internalId() == 0:
            return None
        return self._groups[index.internalId() - 1].rows[index.row()]

    def index_of(self, path: str) -> QModelIndex:
        where = self._where.get(path)
        if where is None:
            return QModelIndex()
        return self.index(where[1], 0, self.index(where[0], 0))

    def group_indexes(self) -> list[QModelIndex]:
        return [self.index(g, 0) for g in range(len(self._groups))]

    # -- QAbstractItemModel ----------------------------------------------------------------------
    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        if not parent.isValid():
            if 0 <= row < len(self._groups) and 0 <= column < len(COLUMNS):
                return self.createIndex(row, column, 0)
            return QModelIndex()
        g = parent.row()
        if parent.internalId() == 0 and 0 <= g < len(self._groups) and 0 <= row < len(self._groups[g].rows):
            return self.createIndex(row, column, g + 1)
        return QModelIndex()

    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid() or index.internalId() == 0:
            return QModelIndex()
        return self.createIndex(index.internalId() - 1, 0, 0)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if not parent.isValid():
            return len(self._groups)
        if parent.internalId() == 0 and parent.column() == 0:
            return len(self._groups[parent.row()].rows)
        return 0

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(COLUMNS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        base = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        return base | Qt.ItemFlag.ItemIsDragEnabled if self.entry(index) is not None else base

    def mimeTypes(self) -> list[str]:
        return ["text/uri-list"]

    def mimeData(self, indexes: list[QModelIndex]) -> QMimeData:
        data = QMimeData()
        paths = {str(e.path) for i in indexes if (e := self.entry(i)) is not None}
        data.setUrls([QUrl.fromLocalFile(p) for p in sorted(paths)])
        return data

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if index.internalId() == 0:
            return self._group_data(self._groups[index.row()], index.column(), role)
        entry = self._groups[index.internalId() - 1].rows[index.row()]
        if index.column() == COPIES_COLUMN:
            return _copies_data(self.duplicates.get(str(entry.path)), role)
        if role == Qt.ItemDataRole.DecorationRole and index.column() == 0 and entry.preview is not None:
            preview = self.thumbs.get(entry.preview)  # its own picture, once decoded
            if preview is not None:
                return preview
        if role == Qt.ItemDataRole.DisplayRole and index.column() == 0 and self.short_names:
            return short_name(entry.name)
        return _entry_data(entry, index.column(), role)

    def set_short_names(self, short: bool) -> None:
        if short != self.short_names:
            self.short_names = short
            self.layoutChanged.emit()

    def _group_data(self, group: _Group, column: int, role: int) -> Any:
        if column != 0:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{group.label}  ({len(group.rows)} · {human_bytes(group.bytes)})"
        if role == Qt.ItemDataRole.DecorationRole:
            return icon("folder") if group.icon_kind is None else kind_icon(group.icon_kind)
        if role == Qt.ItemDataRole.ToolTipRole:
            return group.tooltip
        if role == Qt.ItemDataRole.FontRole:
            font = QFont()
            font.setBold(True)
            return font
        return None


def short_name(name: str) -> str:
    """``name`` without its ``.safetensors`` (other extensions kept: they say something)."""
    return name[: -len(".safetensors")] if name.lower().endswith(".safetensors") else name


_MUTED = QBrush(QColor("#8a94a6"))
_ERROR = QBrush(QColor("#ff6b6b"))


def _entry_data(e: Entry, column: int, role: int) -> Any:
    if role == Qt.ItemDataRole.DisplayRole:
        if column == 0:
            return e.name
        if e.status == "pending":
            return (
                "…" if column in (1, 4) else (human_bytes(e.size) if column == 3 else kind_text(e.group_kind))
            )
        if column == 1:
            return "error" if e.status == "error" else (e.family or "-")
        if column == 2:
            return kind_text(e.kind)
        if column == 3:
            return human_bytes(e.size)
        if column == 4:
            return e.dtype or "-"
        if column == 6:
            return used_text(e.last_used)
    if role == Qt.ItemDataRole.DecorationRole and column == 0:
        return icon("error", "#ff6b6b") if e.status == "error" else kind_icon(e.group_kind)
    if role == Qt.ItemDataRole.ForegroundRole:
        if e.status == "error":
            return _ERROR
        if e.status == "pending":
            return _MUTED
    if role == Qt.ItemDataRole.ToolTipRole:
        if e.error:
            return f"{e.path}\n\n{e.error}"
        words = f"\n\nTrigger words: {', '.join(e.trigger_words)}" if e.trigger_words else ""
        return str(e.path) + words + ("\n\n" + "\n".join(e.warnings) if e.warnings else "")
    if role == Qt.ItemDataRole.TextAlignmentRole and column == 3:
        return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if role == ENTRY_ROLE:
        return e
    return None


def used_text(when: float | None, now: float | None = None) -> str:
    """ "today", "3 d ago", "5 wk ago" or "never": short enough for a narrow column."""
    if when is None:
        return "never"
    days = int(((now if now is not None else time.time()) - when) // 86400)
    if days < 1:
        return "today"
    if days < 14:
        return f"{days} d ago"
    if days < 120:
        return f"{days // 7} wk ago"
    return time.strftime("%Y-%m-%d", time.localtime(when))


def _copies_data(dup: Duplicate | None, role: int) -> Any:
    if dup is None:
        return None
    if role == Qt.ItemDataRole.DisplayRole:
        return f"{len(dup.others) + 1}×" if dup.confirmed else f"{len(dup.others) + 1}?"
    if role == Qt.ItemDataRole.ToolTipRole:
        names = "\n".join(str(p) for p in dup.others)
        if dup.confirmed:
            return f"Same SHA-256 as:\n{names}\n\n{human_bytes(dup.wasted)} wasted on copies"
        return f"Same size as (not hashed yet, so only possibly the same):\n{names}"
    if role == Qt.ItemDataRole.ForegroundRole and not dup.confirmed:
        return _MUTED
    if role == Qt.ItemDataRole.TextAlignmentRole:
        return int(Qt.AlignmentFlag.AlignCenter)
    return None
