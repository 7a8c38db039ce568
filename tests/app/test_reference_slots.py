"""Editing in the window: the Generate panel's reference slots appear with a family that takes
reference pictures (as many as it takes, three at most), are filled by picking, dropping or the
picture menu's "Edit this picture", and become the request's ``references``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from app.gui.picture_menu import PictureMenu
from core.archs.catalog import reference_limit
from core.generate.png import save_png


def _picture(path: Path) -> Path:
    return save_png(path, np.full((16, 16, 3), 90, np.uint8), "")


def _drop(widget: object, *paths: Path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    event = QDropEvent(
        QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    )
    widget.dropEvent(event)  # type: ignore[attr-defined]


def test_the_families_records_say_how_many_pictures_they_take() -> None:
    assert reference_limit("sd1") == 0 and reference_limit("flux-dev") == 0 and reference_limit(None) == 0
    assert reference_limit("flux-kontext") == 3 and reference_limit("flux2-klein-4b") == 10


def test_slots_show_for_an_editing_family_and_become_the_requests_references(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    refs = panel.references
    assert not refs.isVisible() and panel.settings().references == ()
    refs.set_limit(reference_limit("flux2-klein-4b"))  # ten: three slots shown
    assert refs.isVisible() and "up to 10" in refs.note.text()
    a, b, c = (_picture(tmp_path / f"{n}.png") for n in "abc")
    _drop(refs, a, b)
    assert refs.paths() == (a, b)
    refs.slots[1].set_path(None)
    _drop(refs, c)  # the first empty slot
    assert panel.settings().references == (a, c)
    refs.set_limit(1)  # a family of one picture: only the first slot counts
    assert panel.settings().references == (a,)
    refs.set_limit(0)
    assert not refs.isVisible() and panel.settings().references == ()


def test_edit_this_picture_fills_the_first_slot_or_says_why_not(panel: GeneratePanel, tmp_path: Path) -> None:
    said: list[tuple[str, str]] = []
    menu = PictureMenu(
        panel, lambda p: None, lambda p: None, lambda p: None, say=lambda t, x: said.append((t, x)),
        edit=panel.references.edit_picture,
    )  # fmt: skip
    picture = _picture(tmp_path / "made.png")

    def edit() -> None:
        (action,) = [a for a in menu.menu(picture).actions() if a.text() == "Edit this picture"]
        action.trigger()

    edit()  # no editing model loaded
    assert said and "takes no reference pictures" in said[0][1] and panel.references.paths() == ()
    panel.references.set_limit(3)
    edit()
    assert panel.references.paths() == (picture,) and len(said) == 1


def test_the_slots_are_kept_across_a_relaunch(qtbot: QtBot, make_window, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    fox, gone = _picture(tmp_path / "fox.png"), _picture(tmp_path / "gone.png")
    window = make_window(tmp_path)
    slots = window.generate_panel.references.slots
    slots[0].set_path(fox)
    slots[2].set_path(gone)
    window.close()  # the panel's fields go to the settings store
    gone.unlink()
    again = make_window(tmp_path)  # the same settings file
    kept = [s.path for s in again.generate_panel.references.slots]
    assert kept == [fox, None, None]  # a picture deleted since is left out
