"""The browser's tree: library entries grouped by folder or by kind, searched, filtered and sorted.

A two-level Qt item model over plain :class:`~core.library.Entry` records, using core's own
search/filter/sort/group functions. Entries arrive in batches while the worker scans; a filled-in
entry that keeps its place is updated in place (one ``dataChanged``), anything that moves rows
schedules one debounced rebuild, so a folder of thousands of files fills in without stalls.
"""

from __future__ import annotations

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
from core.library import Entry, filter_entries, group_by_folder, group_by_kind, search, sort_entries
from core.library.query import natural_key

COLUMNS = ("Name", "Family", "Kind", "Size", "Dtype")
KIND_TITLES = {
    "checkpoint": "Checkpoints",
    "diffusion_model": "Diffusion models",
    "lora": "LoRAs",
    "vae": "VAEs",
    "text_encoder": "Text encoders",
    "controlnet": "ControlNets",
    "upscale_model": "Upscalers",
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
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(120)
        self._timer.timeout.connect(self.rebuild)

    # -- feeding ---------------------------------------------------------------------------------
    def clear(self) -> None:
        self._entries.clear()
        self.rebuild()

    def add_entries(self, entries: list[Entry]) -> None:
        dirty = False
        for entry in entries:
            key = str(entry.path)
            old = self._entries.get(key)
            self._entries[key] = entry
            if old is not None and key in self._where and self._place(old) == self._place(entry):
                self._update_in_place(key, entry)
            elif old is None and not self._visible(entry):
                continue
            else:
                dirty = True
        if dirty and not self._timer.isActive():
            self._timer.start()

    def remove_missing(self, keep: set[str]) -> None:
        """Drop entries whose files are gone from the last scan."""
        for key in [k for k in self._entries if k not in keep]:
            del self._entries[key]
        self.rebuild()

    def _visible(self, entry: Entry) -> bool:
        return bool(self._filtered([entry]))

    def _place(self, entry: Entry) -> tuple[object, ...]:
        group = entry.group_kind if self.grouping == "kind" else (entry.root, entry.folder)
        sort_value = {"family": entry.family, "size": entry.size, "date": entry.mtime_ns}.get(self.sort_key)
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
        if kinds is not None or families is not None:
            out = filter_entries(out, kinds=kinds, families=families)
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
        if self.grouping == "kind":
            for kind, rows in group_by_kind(shown).items():
                groups.append(_Group(KIND_TITLES.get(kind, kind_text(kind)), kind, kind, rows))
        else:
            for key, rows in group_by_folder(shown).items():
                label = f"{key.root.name}/{key.folder}" if key.folder else key.root.name
                groups.append(_Group(label, f"{key.label}\n({key.origin})", None, rows))
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
        return _entry_data(self._groups[index.internalId() - 1].rows[index.row()], index.column(), role)

    def _group_data(self, group: _Group, column: int, role: int) -> Any:
        if column != 0:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{group.label}  ({len(group.rows)})"
        if role == Qt.ItemDataRole.DecorationRole:
            return icon("folder") if group.icon_kind is None else kind_icon(group.icon_kind)
        if role == Qt.ItemDataRole.ToolTipRole:
            return group.tooltip
        if role == Qt.ItemDataRole.FontRole:
            font = QFont()
            font.setBold(True)
            return font
        return None


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
        return str(e.path) + ("\n\n" + "\n".join(e.warnings) if e.warnings else "")
    if role == Qt.ItemDataRole.TextAlignmentRole and column == 3:
        return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    if role == ENTRY_ROLE:
        return e
    return None
