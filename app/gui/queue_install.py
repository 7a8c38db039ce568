"""The Queue dock put into the window: its queue file (beside the settings or in the app's data
folder), what the artist is told about that file on start, and the panel's connections."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, QStandardPaths, Qt

from app.gui.errors import describe_exception
from app.gui.queue_panel import QueuePanel
from core.errors import LoadoutError
from core.generate.events import GeneratedImage
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.queue.store import JobStore

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


def queue_file(store: QSettings) -> Path:
    """The queue file: beside an ini settings file (tests, the demo), else in the app's data folder."""
    if store.format() == QSettings.Format.IniFormat and store.fileName():
        return Path(store.fileName()).with_name("queue.sqlite")
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".loadout") / "queue.sqlite"


def store_notice(store: JobStore) -> LoadoutError | None:
    """What the artist is told about the queue file on start: damaged rows set aside, another
    Loadout owning it."""
    notes = []
    if store.quarantined:
        shown = "; ".join(store.quarantined[:3]) + (" ..." if len(store.quarantined) > 3 else "")
        notes.append(f"{len(store.quarantined)} damaged job(s) were set aside ({shown})")
    if not store.owner:
        pid = f" (process {store.owner_pid})" if store.owner_pid > 0 else ""
        notes.append(f"another Loadout{pid} has this queue open: its running job stays with it")
    if not notes:
        return None
    return LoadoutError(
        "; ".join(notes),
        fix="The other jobs are queued as before; jobs are shared, never run twice",
        code="queue_file",
    )


def install_queue_panel(window: MainWindow) -> QueuePanel:
    """The Queue dock, fed by the Generate panel's settings and output folder; a cell opens in the
    picture view (with its parameters)."""
    try:
        store = JobStore(queue_file(window.store))
    except LoadoutError as exc:
        window.show_message(describe_exception("queue", exc))
        store = JobStore()
    panel = QueuePanel(
        window.backend,
        store,
        window.generate_panel.settings,
        lambda: window.generate.output_folder,
        lambda: window.settings.ray_address,
        parent=window,
    )

    def show(path: str) -> None:
        try:
            text = read_png_parameters(Path(path))
            image = GeneratedImage(Path(path), parse_parameters(text), text, Path(path).stem)
        except LoadoutError as exc:
            window.show_message(describe_exception("queue", exc))
            return
        window.gallery.add((image,))
        window.pictures.show(Path(path))

    panel.open_image.connect(show)
    panel.finished_images.connect(
        lambda found: window.gallery.add_files([(path, label) for path, label in found if path.is_file()])
    )
    panel.error.connect(lambda exc: window.show_message(describe_exception("queue", exc)))
    notice = store_notice(store)
    if notice is not None:
        window.show_message(describe_exception("queue", notice))
    # a dock like the others (closable, scrolls, in the View menu), tabbed with Generate
    window.layout_.add("queue", "Queue", panel, Qt.DockWidgetArea.RightDockWidgetArea, "generate")
    return panel
