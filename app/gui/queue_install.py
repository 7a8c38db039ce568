"""The Queue dock put into the window: its queue file (beside the settings or in the app's data
folder), what the artist is told about that file on start, and the panel's connections."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths, Qt

from app.backend.backend import Backend
from app.gui.dock_layout import DockLayout
from app.gui.errors import Friendly, describe_exception
from app.gui.pictures import Pictures
from app.gui.queue_panel import QueuePanel
from core.errors import LoadoutError
from core.generate.events import GeneratedImage
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import ImageSettings
from core.queue.store import JobStore


@dataclass(frozen=True)
class QueueHost:
    """What the Queue dock needs of the rest of the window."""

    settings: Callable[[], ImageSettings]  # the Generate panel's fields as a request
    output_folder: Callable[[], Path]
    ray_address: Callable[[], str]
    say: Callable[[Friendly], None]  # a message in the window's message bar


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


def install_queue_panel(
    layout: DockLayout, backend: Backend, store: QSettings, pictures: Pictures, host: QueueHost
) -> QueuePanel:
    """The Queue dock, tabbed with Generate, fed by the Generate panel's settings and output
    folder; its cells and grids join the gallery, and a cell opens in the picture view (with its
    parameters)."""

    def say(exc: LoadoutError) -> None:
        host.say(describe_exception("queue", exc))

    try:
        jobs = JobStore(queue_file(store))
    except LoadoutError as exc:
        say(exc)
        jobs = JobStore()
    panel = QueuePanel(
        backend, jobs, host.settings, host.output_folder, host.ray_address, parent=layout.window
    )

    def show(path: str) -> None:
        try:
            text = read_png_parameters(Path(path))
            image = GeneratedImage(Path(path), parse_parameters(text), text, Path(path).stem)
        except LoadoutError as exc:
            say(exc)
            return
        pictures.gallery.add((image,))
        pictures.show(Path(path))

    panel.open_image.connect(show)
    panel.finished_images.connect(
        lambda found: pictures.gallery.add_files([(path, label) for path, label in found if path.is_file()])
    )
    panel.error.connect(say)
    notice = store_notice(jobs)
    if notice is not None:
        say(notice)
    # a dock like the others (closable, scrolls, in the View menu), tabbed with Generate
    layout.add("queue", "Queue", panel, Qt.DockWidgetArea.RightDockWidgetArea, "generate")
    return panel
