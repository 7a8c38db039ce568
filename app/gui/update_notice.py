"""The window's side of the opt-in update check (app/updates.py): run it on a background thread
at start when the setting is on, and say so in the message bar when a newer release exists.

Never blocks the window: the one request runs on a daemon thread with a short timeout and its
result comes back as a queued signal; no network or a broken feed is silent (logged only)."""

from __future__ import annotations

import contextlib
import logging
import threading

from PySide6.QtCore import QObject, QUrl, Signal
from PySide6.QtGui import QDesktopServices

from app import updates
from app.gui.errors import Friendly

log = logging.getLogger(__name__)


class UpdateNotice(QObject):
    """Checks once; ``done`` carries the :class:`~app.updates.CheckResult` to the GUI thread."""

    done = Signal(object)

    def __init__(self, window: QObject, url: str, current: str | None = None) -> None:
        super().__init__(window)
        self.window = window
        self.url = url
        self.current = current or updates.current_version()
        self.result: updates.CheckResult | None = None
        self.thread: threading.Thread | None = None
        self.done.connect(self._show)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._check, name="loadout-update-check", daemon=True)
        self.thread.start()

    def _check(self) -> None:
        result = updates.check(self.url, self.current)
        with contextlib.suppress(RuntimeError):  # the window closed meanwhile: nobody to tell
            self.done.emit(result)

    def _show(self, result: updates.CheckResult) -> None:
        self.result = result
        if result.error is not None:
            log.info("update check: %s", result.error)
            return
        if result.newer is None:
            return
        page = result.newer.url
        notice = Friendly(
            "A newer Loadout is out",
            f"Loadout {result.newer.version} is released (this is {result.current}). "
            "Your settings, queue, cache and pictures stay as they are when you update.",
            "info",
        )
        bar = getattr(self.window, "message", None)
        if bar is not None and not bar.isVisible():  # never over an error the artist has to read
            bar.show_message(notice, ("Open the release page", lambda: QDesktopServices.openUrl(QUrl(page))))
        else:
            status = getattr(self.window, "statusBar", None)
            if status is not None:
                status().showMessage(f"Loadout {result.newer.version} is released: {page}", 60000)


def start_update_check(window: QObject, enabled: bool) -> UpdateNotice | None:
    """Start the check when the artist turned it on and this build names a feed."""
    url = updates.feed_url()
    if not enabled or url is None:
        return None
    notice = UpdateNotice(window, url)
    notice.start()
    return notice
