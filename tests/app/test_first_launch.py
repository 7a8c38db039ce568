"""The first window fits the screen and the Generate button is in view on it, on the screens artists
have: 1366 x 768 at 100 %, 1920 x 1080 at 150 % (1280 x 720 logical) and 2560 x 1440, also with a
taskbar taking 40 px; checked from the widgets' geometry in the default layout at the size a first
launch opens at (the screen's available area less the window manager's frame)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtGui import QImage

from app.gui.dock_layout import FRAME_ALLOWANCE, initial_size_for

SCREENS = {  # available area in logical pixels
    "1366x768@100%": QSize(1366, 768),
    "1366x768@100% with a taskbar": QSize(1366, 728),
    "1920x1080@150%": QSize(1280, 720),
    "1920x1080@150% with a taskbar": QSize(1280, 693),
    "2560x1440@100%": QSize(2560, 1440),
}


def inside(widget, window) -> bool:  # type: ignore[no-untyped-def]
    """``widget`` is shown whole: inside the window and not cut by a scroll area around it."""
    rect = QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())
    whole = widget.visibleRegion().boundingRect() == widget.rect()
    return widget.isVisible() and window.rect().contains(rect) and whole


@pytest.mark.parametrize("name", list(SCREENS))
def test_a_first_window_and_its_generate_button_fit_the_screen(
    qtbot, make_window, name: str, tmp_path: Path
) -> None:
    free = SCREENS[name]
    size = initial_size_for(free)
    with_frame = QSize(
        size.width() + FRAME_ALLOWANCE.left() + FRAME_ALLOWANCE.right(),
        size.height() + FRAME_ALLOWANCE.top() + FRAME_ALLOWANCE.bottom(),
    )
    assert with_frame.width() <= free.width() and with_frame.height() <= free.height()
    window = make_window()
    window.resize(size)
    window.layout_.arrange()
    qtbot.wait(50)
    assert window.size() == size, (window.size(), window.minimumSizeHint())
    panel = window.generate_panel
    for widget in (panel.generate_button, panel.prompt, panel.negative, panel.model.combo, window.picture):
        assert inside(widget, window), (name, type(widget).__name__, widget.visibleRegion().boundingRect())
    assert window.docks["gallery"].isVisible() and inside(window.gallery.empty, window)
    assert inside(window.statusBar(), window)
    # a picture in the gallery shows whole, its name under it (the strip was a row too short)
    picture = QImage(256, 256, QImage.Format.Format_RGB32)
    picture.fill(0x336699)
    picture.save(str(tmp_path / "00000-1.png"))
    window.gallery.add_files([(tmp_path / "00000-1.png", "00000-1")])
    qtbot.waitUntil(lambda: not window.gallery.loading())
    qtbot.wait(50)
    strip = window.gallery.strip
    assert inside(strip, window), name
    item = strip.visualItemRect(strip.item(0))
    assert strip.viewport().rect().contains(item), (name, item, strip.viewport().rect())


def test_the_generate_button_stays_in_view_when_the_settings_are_long(qtbot, make_window) -> None:
    """Hires fix, ControlNet rows and a sweep open: the settings scroll, the Generate button stays."""
    window = make_window()
    window.resize(initial_size_for(SCREENS["1920x1080@150%"]))
    window.layout_.arrange()
    panel = window.generate_panel
    panel.workflows.setChecked(True)
    panel.hires.enabled.setChecked(True)
    for _ in range(3):
        panel.workflows.controlnets.add_row()
    qtbot.wait(50)
    assert inside(panel.generate_button, window)
    assert panel.settings_area.verticalScrollBar().maximum() > 0  # the settings scroll instead
