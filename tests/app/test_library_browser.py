"""The model library as artists ask for it, through the real window: hashes computed in the
background (never blocking the window, stopped with it), duplicates in a column, the details pane
and a filter, LoRAs filtered to the loaded model's family, last used, disk usage, long names cut."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from PySide6.QtCore import QRect, Qt

from app.demo import DemoLibrary
from app.gui.library_model import COPIES_COLUMN, LibraryTreeModel, used_text
from core.library import Entry
from core.library.hasher import HashProgress
from tests.app.util import strict
from tests.core.library.conftest import tiny_lora


def _copies(window, path: Path) -> str | None:
    model = window.browser.model
    index = model.index_of(str(path))
    assert index.isValid(), f"{path.name} is not shown"
    return model.data(index.siblingAtColumn(COPIES_COLUMN))


def _hashers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "loadout-hasher" and t.is_alive()]


def _folder_with_copies(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    root = tmp_path / "models"
    style = tiny_lora(root / "loras" / "style.safetensors")
    copy = root / "loras" / "old" / "style (1).safetensors"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(style.read_bytes())
    other = tiny_lora(root / "loras" / "xl" / "detail-xl.safetensors", "sdxl")
    return root, style, copy, other


def test_hashes_arrive_in_the_background_and_duplicates_show(qtbot, make_window, tmp_path: Path) -> None:
    root, style, copy, other = _folder_with_copies(tmp_path)
    window = make_window(root)
    qtbot.waitUntil(lambda: window.browser.model.index_of(str(other)).isValid(), timeout=30000)
    done = window.backend.hash_progress
    with qtbot.waitSignal(done, check_params_cb=lambda p: not p.running, timeout=30000):
        pass
    qtbot.waitUntil(lambda: _copies(window, style) == "2×", timeout=10000)
    assert _copies(window, copy) == "2×" and _copies(window, other) is None
    assert "in duplicates" in window.browser.summary.text()

    assert window.browser.select_path(copy)
    body = window.details.body.toPlainText()
    assert "Duplicate." in body and str(style) in body
    entry = window.details.entry
    assert entry is not None and entry.sha256 is not None
    assert entry.sha256[:10] in body and "LoRA hash (A1111)" in body

    b = window.browser
    b.only_duplicates.setChecked(True)
    assert b.model.shown_count() == 2
    b.only_duplicates.setChecked(False)
    assert b.model.shown_count() == 3
    window.close()
    assert not _hashers()  # quitting ends the hash thread


def test_possible_duplicates_until_the_hash_confirms() -> None:
    model = LibraryTreeModel()
    root = Path("/m")

    def e(name: str, sha: str | None) -> Entry:
        return Entry(root / name, "folder", root, "", None, 100, 0, "ok", "lora", "sd1", sha256=sha)

    model.add_entries([e("a", None), e("b", None)])
    model.rebuild()
    assert model.data(model.index_of("/m/a").siblingAtColumn(COPIES_COLUMN)) == "2?"
    model.add_entries([e("a", "h1"), e("b", "h2")])  # different after all
    assert model.data(model.index_of("/m/a").siblingAtColumn(COPIES_COLUMN)) is None
    assert used_text(None) == "never" and used_text(1000.0, now=1000.0 + 3 * 86400) == "3 d ago"


def test_the_hash_pass_can_be_stopped_from_the_browser(qtbot, make_window, tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    for i in range(3):
        (folder / f"model{i}.safetensors").write_bytes(os.urandom(48 << 20))  # real data: not skipped
    window = make_window(folder)
    b = window.browser
    qtbot.waitUntil(lambda: b.hash_stop.isVisible(), timeout=30000)
    b.hash_stop.click()
    assert not b.hash_stop.isVisible()
    qtbot.waitUntil(lambda: not window.backend.hasher.busy, timeout=10000)
    hashed = [e for e in b.model.entries() if e.sha256 is not None]
    assert len(hashed) < 3  # stopped before the end
    # a rescan resumes the pass (what was hashed stays); Stop (Esc) ends it too
    with qtbot.waitSignal(window.backend.hash_progress, timeout=30000):
        window.backend.scan([str(folder)])
    qtbot.waitUntil(lambda: window.backend.hasher.busy and not window.backend.busy, timeout=30000)
    window.backend.interrupt()
    qtbot.waitUntil(lambda: not window.backend.hasher.busy, timeout=10000)
    qtbot.waitUntil(lambda: not b.hash_stop.isVisible(), timeout=5000)


def test_loras_are_filtered_to_the_loaded_models_family_and_uses_are_remembered(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    xl = tiny_lora(tmp_path / "more" / "detail-xl.safetensors", "sdxl")
    window = make_window(demo_library.folder, tmp_path / "more")
    b, backend = window.browser, window.backend
    qtbot.waitUntil(lambda: b.model.index_of(str(xl)).isValid() and not backend.busy, timeout=30000)
    assert not b.fits.isEnabled() and not b.fits.isChecked()
    with strict(qtbot, backend, "started", "model_loaded", "finished"):
        window.load_entry(next(e for e in b.model.entries() if e.path == demo_library.checkpoint))
    qtbot.waitUntil(lambda: b.fits.isChecked(), timeout=5000)
    assert "sd1" in b.fits.text()
    assert not b.model.index_of(str(xl)).isValid()  # an SDXL LoRA does not fit an SD1 model
    assert b.model.index_of(str(demo_library.lora)).isValid()  # the SD1 one does
    assert b.model.index_of(str(demo_library.checkpoint)).isValid()  # other kinds stay
    b.fits.setChecked(False)
    assert b.model.index_of(str(xl)).isValid()

    # the load was noted: "Used" says today and sorting by last use puts it first
    qtbot.waitUntil(lambda: _used(window, demo_library.checkpoint) == "today", timeout=5000)
    assert _used(window, xl) == "never"
    b.grouping.setCurrentIndex(b.grouping.findData("kind"))
    b.sort.setCurrentIndex(b.sort.findData("last_used"))
    b.descending.setChecked(True)
    first = b.model.entry(b.model.index(0, 0, b.model.index(0, 0)))
    assert first is not None and first.path == demo_library.checkpoint
    assert window.browser.select_path(demo_library.checkpoint)
    assert "Last used" in window.details.body.toPlainText()


def _used(window, path: Path) -> str:
    model = window.browser.model
    return model.data(model.index_of(str(path)).siblingAtColumn(6))


def test_disk_usage_per_folder_and_kind(qtbot, make_window, tmp_path: Path) -> None:
    root, style, copy, other = _folder_with_copies(tmp_path)
    window = make_window(root)
    b = window.browser
    qtbot.waitUntil(lambda: b.model.index_of(str(other)).isValid() and not window.backend.busy, timeout=30000)
    total = sum(p.stat().st_size for p in (style, copy, other))
    labels = [b.model.data(i) for i in b.model.group_indexes()]
    assert any(label.startswith("models/loras/old  (1 · ") for label in labels), labels
    tip = b.summary.toolTip()
    assert "Disk usage per folder" in tip and str(root) in tip and "LoRAs" in tip
    assert f"{total / 1000:.1f} KB on disk" in b.summary.text()


def test_a_long_file_name_is_cut_and_never_widens_the_window(qtbot, make_window, tmp_path: Path) -> None:
    long_name = "a_" + "very_long_model_name_from_a_download_site_" * 5 + "v2.safetensors"
    path = tiny_lora(tmp_path / "loras" / long_name)
    short = tiny_lora(tmp_path / "loras" / "s.safetensors")
    window = make_window(tmp_path / "loras")
    b = window.browser
    qtbot.waitUntil(lambda: b.model.index_of(str(path)).isValid() and not window.backend.busy, timeout=30000)
    assert b.select_path(short)
    before = (window.minimumSizeHint(), b.minimumSizeHint(), window.details.minimumSizeHint())
    assert b.select_path(path)
    qtbot.wait(50)
    after = (window.minimumSizeHint(), b.minimumSizeHint(), window.details.minimumSizeHint())
    assert [a.width() <= b.width() for a, b in zip(after, before, strict=True)] == [True] * 3, (before, after)
    assert window.details.title.toolTip() == long_name  # cut in the pane, whole in the tooltip
    name_column = b.tree.header().sectionSize(0)
    assert b.tree.sizeHintForColumn(0) > name_column  # the tree cuts the name (in the middle) too


def test_the_summary_is_read_whole_while_files_are_hashed(qtbot, make_window, tmp_path: Path) -> None:
    """At a laptop's library width the footer said "10 files · 1 unreadab" while the hash pass
    ran: the pass's line took half of the summary's row (issue 30)."""
    folder = tmp_path / "models"
    folder.mkdir()
    for i in range(12):
        tiny_lora(folder / f"style-{i:02d}.safetensors")
    (folder / "broken.safetensors").write_bytes(b"<html>404</html>")
    window = make_window(folder)
    window.resize(1350, 680)  # 1366 x 768 less a frame and a taskbar
    window.layout_.arrange()
    b = window.browser
    qtbot.waitUntil(lambda: len(b.model.entries()) == 13 and not window.backend.busy, timeout=30000)
    window.backend.hash_progress.emit(HashProgress(3, 13, folder / "style-04.safetensors", True))
    qtbot.waitUntil(b.hash_status.isVisible)
    qtbot.wait(50)
    for label in (b.summary, b.hash_status):  # whole, on as many lines as it wraps to
        room = label.contentsRect()
        flags = int(Qt.TextFlag.TextWordWrap) if label.wordWrap() else 0
        need = label.fontMetrics().boundingRect(QRect(0, 0, room.width(), 10_000), flags, label.text())
        assert need.width() <= room.width() and need.height() <= room.height(), (label.text(), need, room)
    assert "unreadable" in b.summary.text() and "on disk" in b.summary.text()
