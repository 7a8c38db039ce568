"""Which folders the library lists: the ones in the settings, this session's (the demo library,
``--folder``) and Loadout's own model folder; reading them again; and, while there is none, the
installs found in the usual places, offered to the empty library."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QStandardPaths

from core.library.sources import installs_in


def own_models_folder() -> Path:
    """Loadout's own model folder (``<app data>/models``): always listed when it exists."""
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation)
    return Path(base) / "Loadout" / "models"


class ModelFolders:
    def __init__(
        self,
        saved: Callable[[], Sequence[str]],  # the settings' folders, as they are now
        scan: Callable[[list[str]], None],  # read these folders (the backend)
        set_empty: Callable[[bool, Sequence[Path]], None],  # the library's empty hint, installs offered
        session: Sequence[str] = (),
        include_own: bool = True,
    ) -> None:
        self.saved, self.scan, self.set_empty = saved, scan, set_empty
        self.session = tuple(session)
        self.include_own = include_own

    def folders(self) -> list[str]:
        saved = list(self.saved())
        found = saved + [f for f in self.session if f not in saved]
        own = own_models_folder()
        if self.include_own and own.is_dir():
            found.insert(0, str(own))
        return found

    def rescan(self) -> None:
        folders = self.folders()
        if folders:
            self.set_empty(False, ())
            self.scan(folders)
        else:  # nothing to list yet: offer the installs found in the usual places
            self.set_empty(True, installs_in(Path.home()))

    def add_session(self, folder: str) -> None:
        """List ``folder`` for this session only (the demo library) and read the folders again."""
        if folder not in self.session:
            self.session = (*self.session, folder)
        self.rescan()
