"""The Queue panel in the real window: queue a grid from the Generate panel's settings, reorder,
pause, cancel, retry, run it in-process on the window's session, watch the grid fill in, open a
cell; the queue file outlives the window."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.demo import DemoLibrary
from app.gui.queue_install import queue_file
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.queue.store import JobStore
from tests.app.test_generate_window import _load


def _grid_settings(window) -> None:
    panel = window.generate_panel
    panel.prompt.setPlainText("a red fox")
    panel.steps.setValue(2)
    panel.size.setCurrentIndex(panel.size.count() - 1)  # custom
    panel.width_.setValue(64)
    panel.height_.setValue(64)


def _select(queue, job_id: int) -> None:
    for i in range(queue.jobs.count()):
        if queue.jobs.item(i).data(Qt.ItemDataRole.UserRole) == job_id:
            queue.jobs.setCurrentRow(i)
            return
    raise AssertionError(f"job {job_id} is not listed")


def test_queue_a_grid_reorder_run_it_and_open_a_cell(
    qtbot, make_window, demo_library: DemoLibrary, store, tmp_path: Path
) -> None:
    window = make_window(demo_library.folder)
    queue = window.queue_panel
    _load(qtbot, window, demo_library.checkpoint)
    _grid_settings(window)
    qtbot.keyClicks(queue.axes["x"], "seed:11,12")
    qtbot.keyClicks(queue.axes["y"], "cfg:4,9")
    qtbot.mouseClick(queue.queue_button, Qt.MouseButton.LeftButton)
    jobs = queue.store.jobs()
    assert len(jobs) == 4 and queue.jobs.count() == 4 and {j.state for j in jobs} == {"queued"}
    last = jobs[-1].id
    _select(queue, last)
    qtbot.mouseClick(queue.up_button, Qt.MouseButton.LeftButton)
    assert [j.id for j in queue.store.jobs()].index(last) == 2  # one place up
    assert queue.grid.rowCount() == 2 and queue.grid.columnCount() == 2  # the grid's cells, waiting

    with qtbot.waitSignals([window.backend.started, window.backend.finished], timeout=120000):
        qtbot.mouseClick(queue.run_button, Qt.MouseButton.LeftButton)
    queue.refresh()
    done = queue.store.jobs()
    assert {j.state for j in done} == {"done"} and queue.total.value() == 1000
    assert {(j.job.request.image.sampling.seed, j.job.request.image.sampling.cfg) for j in done} == {
        (11, 4.0), (11, 9.0), (12, 4.0), (12, 9.0),
    }  # fmt: skip
    item = queue.grid.item(1, 1)
    assert item is not None and not item.icon().isNull()  # the cell shows its picture
    folder = done[0].job.request.output.parent
    assert (folder / "grid.png").is_file() and folder.parent.parent == tmp_path / "pictures"
    # the cells and the grid are in the gallery as they finish, labelled by job and cell
    cells = {p for j in done for p in j.images}
    assert cells | {folder / "grid.png"} <= set(window.gallery.paths())
    labels = [window.gallery.strip.item(i).text() for i in range(window.gallery.strip.count())]
    assert len(set(labels)) == len(labels) and f"grid {done[0].job.grid}" in labels
    assert any(label.startswith(f"#{done[0].id} seed 11") for label in labels), labels
    before = len(window.gallery.paths())
    queue._open_cell(1, 1)  # what a double-click does: the cell in the viewer, at the gallery's front
    assert len(window.gallery.paths()) == before
    shown = window.picture.view.path
    assert shown is not None and window.gallery.paths()[0] == shown
    p = parse_parameters(read_png_parameters(shown))
    assert (p.seed, p.cfg) == (12, 9.0)

    # after a relaunch the grid is shown again and a finished job opens with a double-click
    window.close()
    again = make_window(demo_library.folder)
    queue = again.queue_panel
    assert queue.grid.rowCount() == 2 and not queue.grid.item(0, 0).icon().isNull()
    _select(queue, done[0].id)
    queue.jobs.itemDoubleClicked.emit(queue.jobs.currentItem())
    assert again.picture.view.path == done[0].images[0]
    assert cells <= set(again.gallery.paths())


def test_pause_cancel_retry_and_the_queue_outlives_the_window(
    qtbot, make_window, demo_library: DemoLibrary, store
) -> None:
    window = make_window(demo_library.folder)
    queue = window.queue_panel
    _load(qtbot, window, demo_library.checkpoint)
    _grid_settings(window)
    qtbot.keyClicks(queue.axes["x"], "steps:1,2,3")
    ids = queue.queue_grid()
    assert len(ids) == 3
    qtbot.mouseClick(queue.pause_button, Qt.MouseButton.LeftButton)
    assert queue.store.paused and queue.pause_button.text() == "Resume"
    with qtbot.waitSignals([window.backend.started, window.backend.finished], timeout=60000):
        queue.run()
    assert {j.state for j in queue.store.jobs()} == {"queued"}  # paused: nothing started
    _select(queue, ids[0])
    qtbot.mouseClick(queue.cancel_button, Qt.MouseButton.LeftButton)
    assert queue.store.get(ids[0]).state == "cancelled"
    _select(queue, ids[0])
    qtbot.mouseClick(queue.retry_button, Qt.MouseButton.LeftButton)
    assert [j.id for j in queue.store.jobs("queued")] == [ids[1], ids[2], ids[0]]  # retried at the end
    window.close()
    again = JobStore(queue_file(store))
    assert [j.id for j in again.jobs("queued")] == [ids[1], ids[2], ids[0]] and again.paused


def test_a_grid_without_a_model_or_an_axis_says_why(qtbot, make_window) -> None:
    window = make_window()
    queue = window.queue_panel
    assert queue.store.jobs() == [] and queue.total.value() == 0  # no 100 % bar on an empty queue
    errors: list = []
    queue.error.connect(errors.append)
    qtbot.keyClicks(queue.axes["x"], "seed:1,2")
    assert queue.queue_grid() == [] and "no model is loaded" in errors[-1].message
    queue.axes["x"].setText("colour:red")
    assert queue.queue_grid() == [] and "not an axis" in errors[-1].message


def test_the_executor_is_a_setting(qtbot, store) -> None:
    from app.gui.settings import AppSettings, SettingsDialog

    assert AppSettings.load(store).ray_address == ""  # in-process by default
    dialog = SettingsDialog(AppSettings())
    qtbot.addWidget(dialog)
    qtbot.keyClicks(dialog.ray, "ray://head:10001")
    dialog.settings().save(store)
    assert AppSettings.load(store).ray_address == "ray://head:10001"


def test_a_damaged_queue_file_never_stops_the_window_and_the_rest_is_usable(
    qtbot, make_window, store, tmp_path: Path
) -> None:
    import json
    import sqlite3

    from tests.core.queue.test_store import _job

    path = queue_file(store)
    first = JobStore(path)
    bad, good = first.add([_job(1, tmp_path), _job(2, tmp_path)])
    first.close()
    with sqlite3.connect(path) as db:
        row = json.loads(db.execute("SELECT job FROM jobs WHERE id=?", (bad,)).fetchone()[0])
        row["request"]["image"]["sampling"]["steps"] = 0
        db.execute("UPDATE jobs SET job=? WHERE id=?", (json.dumps(row), bad))
    window = make_window()
    queue = window.queue_panel
    assert [queue.jobs.item(i).data(Qt.ItemDataRole.UserRole) for i in range(queue.jobs.count())] == [good]
    assert window.message.isVisible() and f"job {bad}" in window.message.text.text()
    assert "set aside" in window.message.text.text()
