"""The library as a grid of cards, beside the tree (the artist's choice, remembered): each file's
preview picture (or its kind's icon), its name on up to two lines (whole where it fits, else cut in
the middle so the version and extension stay; the whole name and path in the tooltip) and badges
for its family, precision and size.

A flat list over the tree model's shown files, in the tree's order: the same search, filters, sort
and grouping, rebuilt when the tree is and updated in place when a file's row changes.
"""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QMimeData,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QRect,
    QRectF,
    QSize,
    Qt,
)
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPalette
from PySide6.QtWidgets import QAbstractItemView, QListView, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from app.gui.library_model import LibraryTreeModel
from app.gui.theme import KIND_COLORS, human_bytes, icon, kind_icon
from app.gui.thumbs import Thumbs
from core.library import Entry

CARD = QSize(168, 204)  # a card: the preview square over two lines of name and a row of badges
PREVIEW = 112
_BREAKS = re.compile(r"(?<=[-_. ])")  # a name wraps after these first


def name_lines(name: str, metrics: QFontMetrics, width: int, lines: int = 2) -> list[str]:
    """``name`` on at most ``lines`` lines of ``width`` px: broken after ``-``, ``_``, ``.`` or a
    space where it can, anywhere where it must; when it does not fit, the last line is the name's
    end cut in the middle ("…") so the version and the extension stay in sight."""
    out: list[str] = []
    rest = name
    while rest and len(out) < lines:
        if metrics.horizontalAdvance(rest) <= width:
            out.append(rest)
            return out
        if len(out) == lines - 1:  # the last line: the rest, cut in the middle
            out.append(_cut_middle(rest, metrics, width))
            return out
        cut = _fit(rest, metrics, width)
        out.append(rest[:cut])
        rest = rest[cut:]
    return out


def _cut_middle(text: str, metrics: QFontMetrics, width: int) -> str:
    """``text`` cut in the middle to ``width``: its end (the version and extension) kept whole in up
    to two thirds of the line, as much of its start as fits before the "…"."""
    tail = 1
    while tail < len(text) and metrics.horizontalAdvance(text[-(tail + 1) :]) <= width * 2 // 3:
        tail += 1
    room = width - metrics.horizontalAdvance("…" + text[-tail:])
    head = 0
    while head < len(text) - tail and metrics.horizontalAdvance(text[: head + 1]) <= room:
        head += 1
    return text[:head] + "…" + text[-tail:]


def _fit(text: str, metrics: QFontMetrics, width: int) -> int:
    """How many characters of ``text`` go on a line: up to a break where one fits, else as many as fit."""
    most = 1
    while most < len(text) and metrics.horizontalAdvance(text[: most + 1]) <= width:
        most += 1
    breaks = [m.start() for m in _BREAKS.finditer(text[: most + 1]) if 0 < m.start() <= most]
    return breaks[-1] if breaks and breaks[-1] >= most // 2 else most


class LibraryCardModel(QAbstractListModel):
    """The tree's shown files as one flat list (group by group, in the tree's order)."""

    def __init__(self, tree: LibraryTreeModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tree = tree
        self._rows: list[Entry] = []
        self._where: dict[str, int] = {}
        self.thumbs = Thumbs(PREVIEW, parent=self)  # larger than the tree's
        self.thumbs.ready.connect(self._preview_ready)
        tree.rebuilt.connect(self.rebuild)
        tree.dataChanged.connect(self._tree_changed)
        self.rebuild()

    def rebuild(self) -> None:
        rows = []
        for group in self.tree.group_indexes():
            for r in range(self.tree.rowCount(group)):
                entry = self.tree.entry(self.tree.index(r, 0, group))
                if entry is not None:
                    rows.append(entry)
        self.beginResetModel()
        self._rows = rows
        self._where = {str(e.path): i for i, e in enumerate(rows)}
        self.endResetModel()

    def _tree_changed(self, first: QModelIndex, _last: QModelIndex, _roles: object = None) -> None:
        entry = self.tree.entry(first)
        row = self._where.get(str(entry.path)) if entry is not None else None
        if entry is not None and row is not None:
            self._rows[row] = entry
            self.dataChanged.emit(self.index(row), self.index(row))

    def _preview_ready(self, picture: str) -> None:
        for row, entry in enumerate(self._rows):
            if entry.preview is not None and str(entry.preview) == picture:
                self.dataChanged.emit(self.index(row), self.index(row), [Qt.ItemDataRole.DecorationRole])

    def entry(self, index: QModelIndex | QPersistentModelIndex) -> Entry | None:
        return self._rows[index.row()] if index.isValid() and index.row() < len(self._rows) else None

    def index_of(self, path: str) -> QModelIndex:
        row = self._where.get(path)
        return self.index(row) if row is not None else QModelIndex()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsDragEnabled

    def mimeTypes(self) -> list[str]:
        return self.tree.mimeTypes()

    def mimeData(self, indexes: list[QModelIndex]) -> QMimeData:
        return self.tree.mimeData([self.tree.index_of(str(e.path)) for i in indexes if (e := self.entry(i))])

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        entry = self.entry(index)
        if entry is None:
            return None
        if role == Qt.ItemDataRole.DecorationRole and entry.preview is not None:
            return self.thumbs.get(entry.preview)
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            tree_index = self.tree.index_of(str(entry.path))
            text = self.tree.data(tree_index, role)
            return f"{entry.name}\n{text}" if role == Qt.ItemDataRole.ToolTipRole else text
        return None


def badges(entry: Entry) -> list[tuple[str, str]]:
    """The card's badges: (text, colour) for its family (its kind's colour), precision and size."""
    if entry.status == "error":
        return [("error", "#ff6b6b"), (human_bytes(entry.size), "#868e96")]
    out = [(entry.family or "?", KIND_COLORS.get(entry.group_kind, KIND_COLORS["unknown"]))]
    if entry.dtype:
        out.append((entry.dtype, "#868e96"))
    out.append((human_bytes(entry.size), "#868e96"))
    return out


class CardDelegate(QStyledItemDelegate):
    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return CARD

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        model = index.model()
        assert isinstance(model, LibraryCardModel)
        entry = model.entry(index)
        if entry is None:
            return
        palette: QPalette = option.palette  # type: ignore[attr-defined]
        rect: QRect = option.rect.adjusted(3, 3, -3, -3)  # type: ignore[attr-defined]
        selected = bool(option.state & QStyle.StateFlag.State_Selected)  # type: ignore[attr-defined]
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(palette.color(QPalette.ColorRole.Mid))
        fill = (
            palette.color(QPalette.ColorRole.Highlight)
            if selected
            else palette.color(QPalette.ColorRole.Base)
        )
        painter.setBrush(fill)
        painter.drawRoundedRect(QRectF(rect), 6, 6)
        top = QRect(rect.x() + (rect.width() - PREVIEW) // 2, rect.y() + 6, PREVIEW, PREVIEW)
        preview = model.data(index, Qt.ItemDataRole.DecorationRole)
        if preview is not None:
            preview.paint(painter, top)
        else:
            glyph = icon("error", "#ff6b6b") if entry.status == "error" else kind_icon(entry.group_kind)
            glyph.paint(painter, top.adjusted(28, 28, -28, -28))
        metrics = QFontMetrics(option.font)  # type: ignore[attr-defined]
        text_role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        painter.setPen(QColor("#ff6b6b") if entry.status == "error" else palette.color(text_role))
        y = top.bottom() + 6
        for line in name_lines(entry.name, metrics, rect.width() - 12):
            painter.drawText(QRect(rect.x() + 6, y, rect.width() - 12, metrics.height()),
                             int(Qt.AlignmentFlag.AlignHCenter), line)  # fmt: skip
            y += metrics.height()
        self._paint_badges(painter, entry, metrics, rect, rect.bottom() - metrics.height() - 6)
        painter.restore()

    @staticmethod
    def _paint_badges(painter: QPainter, entry: Entry, metrics: QFontMetrics, rect: QRect, y: int) -> None:
        x = rect.x() + 6
        for text, colour in badges(entry):
            w = metrics.horizontalAdvance(text) + 10
            if x + w > rect.right() - 4:
                break
            box = QRect(x, y, w, metrics.height() + 2)
            painter.setPen(QColor(colour))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(QRectF(box), 4, 4)
            painter.drawText(box, int(Qt.AlignmentFlag.AlignCenter), text)
            x += w + 4


class LibraryCards(QListView):
    """The grid: cards flow left to right and wrap with the panel's width."""

    def __init__(self, model: LibraryCardModel) -> None:
        super().__init__()
        self.setModel(model)
        self.setItemDelegate(CardDelegate(self))
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setMovement(QListView.Movement.Static)
        self.setUniformItemSizes(True)
        self.setWrapping(True)
        self.setSpacing(2)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setDragEnabled(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DragOnly)

    def cards(self) -> LibraryCardModel:
        model = self.model()
        assert isinstance(model, LibraryCardModel)
        return model
