"""The right-click menu of every picture (viewer, gallery, sweep cells): open it in the system's
viewer, reveal it in its folder, copy its parameters, use its settings (prompt, seed, sampler,
LoRAs and their strengths), edit it (the first reference slot of Generate), delete it (to the
trash where the platform has one, after asking)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QFile, QPoint, QProcess, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QMenu, QMessageBox, QWidget

from app.gui.viewer import read_infotext


def reveal_in_folder(path: Path) -> bool:
    """Show the file selected in the file manager where the platform can, else open its folder;
    False when nothing could be started (no file manager or desktop launcher)."""
    if sys.platform == "darwin":
        return bool(QProcess.startDetached("open", ["-R", str(path)])[0])
    if sys.platform == "win32":
        return bool(QProcess.startDetached("explorer", [f"/select,{path}"])[0])
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.parent)))


def open_file(path: Path) -> bool:
    """Open ``path`` in the system's viewer; False when there is none to start."""
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))


def delete_picture(path: Path) -> bool:
    """Move ``path`` to the trash where the platform has one, else delete it; True when it is gone."""
    if QFile.moveToTrash(str(path)):
        return True
    return QFile.remove(str(path))


_NO_EDIT = (
    "Edit this picture",
    "The loaded model takes no reference pictures. Load an editing model (FLUX.1 Kontext, FLUX.2) first.",
)
_NO_LAUNCHER = (
    "The system found no program to open {what} (on Linux: xdg-open, from xdg-utils, is missing). "
    "It is at {path}."
)


class PictureMenu:
    """Builds the menu for one picture; ``use_settings`` and ``deleted`` are the window's."""

    def __init__(
        self,
        parent: QWidget,
        use_settings: Callable[[Path], None],
        deleted: Callable[[Path], None],
        view: Callable[[Path], None],
        say: Callable[[str, str], None] = lambda title, text: None,
        edit: Callable[[Path], bool] | None = None,
    ) -> None:
        """``edit``: "Edit this picture" (the picture into the first reference slot; False when the
        loaded model takes no reference pictures)."""
        self.parent = parent
        self.edit = edit
        self.say = say  # (title, text): a failure the artist must hear about
        self.use_settings = use_settings
        self.deleted = deleted
        self.view = view
        self.confirm: Callable[[Path], bool] = self._ask

    def menu(self, path: Path) -> QMenu:
        menu = QMenu(self.parent)
        menu.addAction("View here", lambda: self.view(path))
        menu.addAction("Open", lambda: self.open(path))
        menu.addAction("Show in folder", lambda: self.reveal(path))
        menu.addSeparator()
        params = read_infotext(path)
        copy = menu.addAction("Copy parameters", lambda: QGuiApplication.clipboard().setText(params))
        use = menu.addAction("Use these settings", lambda: self.use_settings(path))
        for action in (copy, use):
            action.setEnabled(bool(params))
            if not params:
                action.setToolTip("This picture carries no generation parameters")
        if self.edit is not None:
            edit = self.edit
            menu.addAction("Edit this picture", lambda: edit(path) or self.say(*_NO_EDIT))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.delete(path))
        return menu

    def open(self, path: Path) -> None:
        if not open_file(path):
            self.say("Could not open the picture", _NO_LAUNCHER.format(what=path.name, path=path))

    def reveal(self, path: Path) -> None:
        if not reveal_in_folder(path):
            self.say("Could not show the folder", _NO_LAUNCHER.format(what="the folder", path=path.parent))

    def popup(self, path: Path, where: QPoint) -> None:
        self.menu(path).popup(where)

    def delete(self, path: Path) -> None:
        if self.confirm(path) and delete_picture(path):
            self.deleted(path)

    def _ask(self, path: Path) -> bool:
        answer = QMessageBox.question(
            self.parent,
            "Delete picture",
            f"Delete {path.name}?\nIt is moved to the trash where the system has one.",
        )
        return answer == QMessageBox.StandardButton.Yes
