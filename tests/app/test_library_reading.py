"""The library made for reading (issue 30): names get the room in a narrow dock, every column and
large previews in the Library workspace, the files' own preview pictures as their icons, trigger
words in the tooltip, column widths remembered, and a deleted file leaves without F5."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage

from tests.app.test_library_browser import tiny_lora


def _listed(qtbot, window, path: Path) -> None:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(
        lambda: window.browser.model.index_of(str(path)).isValid() and not window.backend.busy, timeout=30000
    )


def test_names_previews_columns_and_a_deleted_file(qtbot, make_window, store, tmp_path: Path) -> None:
    folder = tmp_path / "loras"
    lora = tiny_lora(folder / "add_detail_xl_v2.safetensors")
    other = tiny_lora(folder / "add_detail_sd15_v1.safetensors")
    preview = QImage(64, 64, QImage.Format.Format_RGB32)
    preview.fill(QColor(200, 10, 10))
    assert preview.save(str(folder / "add_detail_xl_v2.preview.png"))
    window = make_window(folder)
    b = window.browser
    _listed(qtbot, window, other)
    header = b.tree.header()

    # the Create workspace's narrow dock: name, family, size; the name gets the rest
    width = b.tree.viewport().width()
    assert width < 620
    size_hidden = width < 400  # in a very narrow dock the size gives way too
    hidden = [header.isSectionHidden(c) for c in range(7)]
    assert hidden == [False, False, True, size_hidden, True, True, True]
    shown = sum(header.sectionSize(c) for c in range(1, 7) if not header.isSectionHidden(c))
    assert header.sectionSize(0) >= min(width - shown, 180)
    # the Library workspace: every column, previews large enough to see
    window.workspaces.show("library")
    qtbot.waitUntil(lambda: b.tree.viewport().width() >= 620)
    assert not any(header.isSectionHidden(c) for c in range(7)) and b.tree.iconSize().width() == 40
    assert b.tree.sizeHintForColumn(0) <= header.sectionSize(0)  # whole names, nothing cut

    # the preview beside the file is its icon (decoded off the GUI thread)
    index = b.model.index_of(str(lora))

    def icon_color() -> QColor:
        icon = b.model.data(index, Qt.ItemDataRole.DecorationRole)
        return icon.pixmap(16, 16).toImage().pixelColor(8, 8)

    qtbot.waitUntil(lambda: icon_color().red() > 150 and icon_color().green() < 60, timeout=10000)

    # column widths are remembered
    header.resizeSection(1, 151)
    window.workspaces.show("create")
    window.close()
    again = make_window(folder)
    _listed(qtbot, again, other)
    assert again.browser.tree.header().sectionSize(1) == 151

    # a file deleted outside Loadout leaves the library without F5
    other.unlink()
    qtbot.waitUntil(lambda: not again.browser.model.index_of(str(other)).isValid(), timeout=15000)
    assert again.browser.model.index_of(str(lora)).isValid()
