"""The window's menu bar: File (folders, settings, Quit), View (each panel, reset layout, zoom) and
Help (keyboard shortcuts, About with the installed version)."""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenuBar, QMessageBox

from app.gui.merge_dialog import open_merge_dialog

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


def app_version() -> str:
    try:
        return metadata.version("loadout")
    except metadata.PackageNotFoundError:
        return "development copy"


def shortcuts_text(window: MainWindow) -> str:
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


def build_menus(window: MainWindow) -> QMenuBar:
    bar = window.menuBar()
    file = bar.addMenu("&File")
    file.addAction(window.add_folder_action)
    file.addAction(window.rescan_action)
    file.addAction("Output folder…", window.generate.choose_output_folder)
    merge = file.addAction(
        "Merge models…", lambda: open_merge_dialog(window, window.backend, window.browser.model.entries())
    )
    merge.setObjectName("merge_models")
    file.addSeparator()
    file.addAction(window.settings_action)
    file.addSeparator()
    file.addAction(window.quit_action)

    view = bar.addMenu("&View")
    for action in window.workspaces.actions:
        view.addAction(action)
    view.addSeparator()
    for dock in window.layout_.docks.values():
        view.addAction(dock.toggleViewAction())
    view.addSeparator()
    reset = view.addAction("Reset layout", window.layout_.arrange)
    reset.setObjectName("reset_layout")
    view.addSeparator()
    picture = window.picture.view
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
