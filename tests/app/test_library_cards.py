"""The library as cards, beside the list: each file's preview, badges (family, precision, size)
and its whole name on up to two lines (a longer one cut in the middle, keeping its end; the whole
name in the tooltip); the artist's choice of list or cards is remembered."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics

from app.demo import DemoLibrary
from app.gui.library_cards import CARD, badges, name_lines


def test_names_wrap_whole_or_keep_their_end(qtbot) -> None:
    metrics = QFontMetrics(QFont())
    width = CARD.width() - 18
    for name in (
        "loadout-demo-sd15-tiny.safetensors",
        "add_detail_xl_v2.safetensors",
        "add_detail_sd15_v1.safetensors",
        "z_image_turbo_bf16.safetensors",
        "qwen_3_4b.safetensors",
    ):
        lines = name_lines(name, metrics, width)
        assert "".join(lines) == name and len(lines) <= 2, lines  # whole: two LoRAs read apart
        assert all(metrics.horizontalAdvance(line) <= width for line in lines)
    long = "inkwash_" + "very_long_style_name_" * 6 + "v3.safetensors"
    lines = name_lines(long, metrics, width)
    assert len(lines) == 2 and "…" in lines[1] and lines[1].endswith("v3.safetensors")
    assert lines[0] == long[: len(lines[0])]
    assert all(metrics.horizontalAdvance(line) <= width for line in lines)


def test_the_library_as_cards_shows_every_file_and_the_choice_is_kept(
    qtbot, make_window, demo_library: DemoLibrary, store
) -> None:
    window = make_window(demo_library.folder)
    b = window.browser
    qtbot.waitUntil(lambda: b.model.shown_count() > 0 and not window.backend.busy, timeout=30000)
    qtbot.mouseClick(b.cards_button, Qt.MouseButton.LeftButton)
    assert b.cards.isVisible() and not b.tree.isVisible() and b.view_mode == "cards"
    assert store.value("library/view") == "cards"
    cards = b.cards.cards()
    assert cards.rowCount() == b.model.shown_count()
    entries = [cards.entry(cards.index(r)) for r in range(cards.rowCount())]
    for r, entry in enumerate(entries):
        assert entry is not None
        tip = cards.data(cards.index(r), Qt.ItemDataRole.ToolTipRole)
        assert tip.startswith(entry.name) and str(entry.path) in tip
    sd1 = next(e for e in entries if e is not None and e.path == demo_library.checkpoint)
    assert [t for t, _colour in badges(sd1)][:1] == ["sd1"] and sd1.dtype in [t for t, _ in badges(sd1)]
    # the search filters the cards as it does the list
    b.search.setText("inkwash")
    qtbot.waitUntil(lambda: cards.rowCount() == b.model.shown_count() == 1, timeout=5000)
    # a card selected is the library's selection; a double-click adds the LoRA / loads the model
    b.search.setText("")
    qtbot.waitUntil(lambda: cards.rowCount() > 1, timeout=5000)
    with qtbot.waitSignal(b.entry_selected) as chosen:
        b.cards.setCurrentIndex(cards.index_of(str(demo_library.checkpoint)))
    assert chosen.args[0].path == demo_library.checkpoint
    assert b.current_entry().path == demo_library.checkpoint
    with qtbot.waitSignal(b.entry_activated) as activated:
        b.cards.doubleClicked.emit(b.cards.currentIndex())
    assert activated.args[0].path == demo_library.checkpoint
    # back to the list: the same file selected there
    qtbot.mouseClick(b.list_button, Qt.MouseButton.LeftButton)
    assert b.tree.isVisible() and b.current_entry().path == demo_library.checkpoint
    assert store.value("library/view") == "list"
    b.restore_header(None, "cards")  # what the next launch does with the remembered choice
    assert b.view_mode == "cards" and b.cards_button.isChecked()
