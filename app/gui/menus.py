"""The window's menu bar: File (folders, settings, Quit), View (each panel, reset layout, zoom) and
Help (keyboard shortcuts, About with the installed version)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import metadata

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenuBar, QMessageBox, QWidget

from app.gui.dock_layout import DockLayout
from app.gui.viewer import PictureView


def app_version() -> str:
    try:
        return metadata.version("loadout")
    except metadata.PackageNotFoundError:
        return "development copy"


def shortcuts_text(window: QWidget) -> str:
    """Every action of the window that has a shortcut, as an HTML table."""
    rows = []
    for action in window.findChildren(QAction):
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        if keys and action.text():
            rows.append((action.text().replace("&", ""), keys))
    rows += [("Generate", "Ctrl+Enter"), ("Zoom the picture", "mouse wheel"), ("Pan the picture", "drag")]
    body = "".join(
        f"<tr><td>{t}</td><td style='padding-left:16px'><b>{k}</b></td></tr>" for t, k in sorted(set(rows))
    )
    return f"<table>{body}</table>"


def build_menus(
    window: QWidget,
    bar: QMenuBar,
    file: Sequence[QAction | tuple[str, Callable[[], None]] | None],
    workspaces: Sequence[QAction],
    layout: DockLayout,
    picture: PictureView,
) -> QMenuBar:
    """File (``file``: actions, (text, slot) pairs, None a separator), View (the ``workspaces``,
    each of the ``layout``'s docks, Reset layout, the ``picture``'s zoom) and Help; ``window``
    parents the Help dialogs and lists the shortcuts."""
    menu = bar.addMenu("&File")
    for item in file:
        if item is None:
            menu.addSeparator()
        elif isinstance(item, QAction):
            menu.addAction(item)
        else:
            menu.addAction(*item)

    view = bar.addMenu("&View")
    for action in workspaces:
        view.addAction(action)
    view.addSeparator()
    for dock in layout.docks.values():
        view.addAction(dock.toggleViewAction())
    view.addSeparator()
    reset = view.addAction("Reset layout", layout.arrange)
    reset.setObjectName("reset_layout")
    view.addSeparator()
    for text, keys, slot in (
        ("Fit picture", "Ctrl+0", picture.fit),
        ("Actual size (100 %)", "Ctrl+1", picture.actual_size),
        ("Zoom in", "Ctrl++", lambda: picture.zoom_by(1)),
        ("Zoom out", "Ctrl+-", lambda: picture.zoom_by(-1)),
    ):
        action = view.addAction(text, slot)
        action.setShortcut(QKeySequence(keys))

    help_ = bar.addMenu("&Help")
    help_.addAction(
        "Keyboard shortcuts",
        lambda: QMessageBox.information(window, "Keyboard shortcuts", shortcuts_text(window)),
    )
    help_.addAction("About Loadout", lambda: QMessageBox.about(window, "About Loadout", about_text()))
    return bar


def about_text() -> str:
    return (
        f"<h3>Loadout {app_version()}</h3>"
        "<p>Stable Diffusion-family models on the hardware you have: a model library, LoRA stacks and a "
        "memory manager you can watch.</p>"
    )
