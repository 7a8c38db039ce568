"""The library tree's columns follow its width: the name takes the room left; a narrow panel (the
Create workspace's dock) shows the name (without ".safetensors"), family and size only, a wide one
(the Library workspace) every column, whole names and the files' preview pictures large enough to
see."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QTreeView

from app.gui.library_model import LibraryTreeModel

WIDE_LIST = 620  # px: from this width on the tree shows every column and large previews
NARROW_HIDES = (2, 4, 5, 6)  # kind (the group and icon say it), dtype, copies, last used
VERY_NARROW = 400  # px: below it the size column goes too (the folder rows still give sizes)
NAME_MIN = 180  # px: the narrowest the name column gets (the tree scrolls sideways below that)


def fit_columns(tree: QTreeView) -> None:
    header = tree.header()
    width = tree.viewport().width()
    wide = width >= WIDE_LIST
    for col in NARROW_HIDES:
        if header.isSectionHidden(col) == wide:
            header.setSectionHidden(col, not wide)
    very_narrow = width < VERY_NARROW  # the size gives way too before the name is cut to "a…s"
    if header.isSectionHidden(3) != very_narrow:
        header.setSectionHidden(3, very_narrow)
    model = tree.model()
    if isinstance(model, LibraryTreeModel):
        model.set_short_names(not wide)
    size = QSize(40, 40) if wide else QSize(16, 16)
    if tree.iconSize() != size:
        tree.setIconSize(size)
    others = sum(header.sectionSize(c) for c in range(1, header.count()) if not header.isSectionHidden(c))
    tree.setColumnWidth(0, max(NAME_MIN, width - others))
