"""The daily loop's window: the wheel scrolls panels and changes only a focused control; the
Generate panel's model picker, pinned Generate/Stop row and status line; workspaces."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QComboBox, QScrollArea, QSlider, QSpinBox, QVBoxLayout, QWidget

from app.gui import wheel_guard
from app.gui.generate_panel import NO_MODEL, GeneratePanel
from core.library import Entry


def wheel(widget: QWidget, down: bool = True) -> None:
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(
        pos, QPointF(widget.mapToGlobal(pos.toPoint())), QPoint(0, 0), QPoint(0, -120 if down else 120),
        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False,
    )  # fmt: skip
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_panel_over_an_unfocused_control_and_changes_a_focused_one(qtbot) -> None:
    """Scrolling down the Generate panel switched the sampler on the way (issue 30)."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    wheel_guard.install(app)
    area = QScrollArea()
    area.setWidgetResizable(True)
    inner = QWidget()
    rows = QVBoxLayout(inner)
    combo, spin, slider = QComboBox(), QSpinBox(maximum=99, value=50), QSlider(Qt.Orientation.Horizontal)
    combo.addItems(["euler", "dpmpp_2m", "ddim"])
    slider.setRange(0, 100)
    slider.setValue(50)
    for w in (combo, spin, slider):
        rows.addWidget(w)
    rows.addSpacing(2000)  # the panel is taller than its scroll area
    area.setWidget(inner)
    qtbot.addWidget(area)
    area.resize(300, 200)
    area.show()
    qtbot.waitExposed(area)
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0
    for control in (combo, spin, slider):
        assert control.focusPolicy() != Qt.FocusPolicy.WheelFocus  # a wheel turn does not focus it
        before_scroll = bar.value()
        wheel(control)
        assert (combo.currentIndex(), spin.value(), slider.value()) == (0, 50, 50), type(control)
        assert bar.value() > before_scroll, "the panel scrolls instead"
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    wheel(spin, down=False)
    assert spin.value() == 51  # the control being edited still takes the wheel


def entry(path: Path, kind: str, family: str) -> Entry:
    return Entry(path, "folder", path.parent, "", None, 1, 0, status="ok", kind=kind, family=family)


def test_the_model_picker_offers_the_librarys_models_and_asks_to_load_one(qtbot) -> None:
    panel = GeneratePanel()
    qtbot.addWidget(panel)
    picker = panel.model
    sd = Path("/m/checkpoints/dreamy-sd15.safetensors")
    flux = Path("/m/diffusion_models/flux1-dev.safetensors")
    lora = Path("/m/loras/ink.safetensors")
    picker.add_entries([entry(sd, "checkpoint", "sd1"), entry(flux, "diffusion_model", "flux"),
                        entry(lora, "lora", "sd1")])  # fmt: skip
    items = [picker.combo.itemText(i) for i in range(picker.combo.count())]
    assert items[0].startswith("No model loaded") and len(items) == 3  # the LoRA is not offered
    assert any("dreamy-sd15" in t and "sd1" in t for t in items)
    with qtbot.waitSignal(picker.load_requested) as asked:
        picker.combo.activated.emit(picker.combo.findData(str(flux)))
    assert asked.args == [flux]
    picker.set_loaded(flux)
    assert picker.current_path() == flux and not picker.combo.itemText(0).startswith("No model")
    picker.keep_only({sd})  # a rescan without it: the loaded one is still shown
    assert picker.combo.count() == 2


def test_generate_is_pinned_with_stop_beside_it_and_the_stale_no_model_line_goes(qtbot) -> None:
    panel = GeneratePanel()
    qtbot.addWidget(panel)
    assert panel.status.text() == NO_MODEL and not panel.generate_button.isEnabled()
    panel.set_available(True)
    assert panel.status.text() != NO_MODEL and panel.generate_button.isEnabled()
    # the settings scroll on their own; Generate is outside their scroll area
    assert not panel.settings_area.isAncestorOf(panel.generate_button)
    panel.show()
    assert panel.stop_button.isHidden()
    panel.on_started()
    assert panel.stop_button.isVisible() and not panel.generate_button.isEnabled()
    with qtbot.waitSignal(panel.stop_requested):
        panel.stop_button.click()
    panel.on_finished()
    assert panel.stop_button.isHidden() and panel.generate_button.isEnabled()


def test_workspaces_give_a_panel_the_whole_window_and_create_gives_it_back(qtbot, make_window) -> None:
    window = make_window()
    spaces = window.workspaces
    assert spaces.names == ["create", "library", "memory", "queue"]
    before = set(spaces.visible_docks())
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    qtbot.keyClick(window, Qt.Key.Key_2, Qt.KeyboardModifier.AltModifier)
    assert spaces.current == "library" and spaces.visible_docks() == []
    assert window.browser.isVisible() and window.details.isVisible()
    assert window.browser.width() > window.width() // 2  # the library reads at full width
    spaces.tabs.setCurrentIndex(2)  # one click on the Memory tab
    assert spaces.current == "memory" and window.memory_panel.isVisible()
    assert window.memory_panel.width() > window.width() // 2 and not window.browser.isVisible()
    qtbot.keyClick(window, Qt.Key.Key_1, Qt.KeyboardModifier.AltModifier)
    assert spaces.current == "create" and set(spaces.visible_docks()) == before
    assert window.browser.isVisible() and window.docks["library"].isAncestorOf(window.browser)
    assert window.docks["memory"].isAncestorOf(window.memory_panel)


def test_a_stop_during_generation_does_not_say_the_model_must_be_loaded_again(qtbot) -> None:
    """After Stop during sampling the event list said "loading was stopped … Load the model again"
    while the model was still loaded (issue 30)."""
    import threading

    from app.backend.messages import EngineEvent
    from app.backend.worker import Job, TaskRunner

    stop = threading.Event()
    runner = TaskRunner(stop)
    events: list[EngineEvent] = []
    runner.result.connect(events.append)

    def stopped_midway(r) -> None:  # type: ignore[no-untyped-def]
        stop.set()  # Stop pressed while the job runs (a flag set before a job is cleared as it starts)
        r.check()

    for task in ("generate", "load"):
        runner.run(Job(task, stopped_midway))  # type: ignore[arg-type]
    generate, load = events
    assert "load the model again" not in generate.reason.lower() and "no picture was saved" in generate.reason
    assert "load the model again" in load.reason.lower()  # a stopped load does need it


@pytest.mark.qt_log_ignore("openDocument", "propagateSizeHints", "does not support raise")
def test_open_and_show_in_folder_say_when_nothing_can_open_them(qtbot, make_window, tmp_path: Path) -> None:
    """Without a desktop launcher (xdg-open) Open and Show in folder failed silently (issue 30). The
    offscreen platform opens nothing, as a desktop without a launcher."""
    if QApplication.platformName() != "offscreen":
        pytest.skip("a real desktop may open the picture")
    window = make_window()
    picture = tmp_path / "00001-1.png"
    picture.write_bytes(b"")
    menu = window.pictures.menu
    actions = {a.text(): a for a in menu.menu(picture).actions()}
    actions["Open"].trigger()
    assert window.message.isVisible() and "xdg-open" in window.message.text.text()
    assert str(picture) in window.message.text.text()
    window.message.hide()
    actions["Show in folder"].trigger()
    assert window.message.isVisible() and "Could not show the folder" in window.message.text.text()


def test_quit_asks_while_a_queue_job_runs(qtbot, make_window, demo_library) -> None:  # type: ignore[no-untyped-def]
    from app.gui.dock_layout import WIDE
    from tests.app.test_generate_window import _load

    window = make_window(demo_library.folder)
    _load(qtbot, window, demo_library.checkpoint)
    queue = window.queue_panel
    assert queue.minimumSizeHint().width() <= WIDE["generate"]  # its buttons were clipped in the dock
    queue.axes["x"].setText("seed:1,2")
    first, _second = queue.queue_grid()
    queue.store.start(first, "local")  # what the runner does as it takes the job
    asked: list[str] = []
    window.confirm_quit = lambda text: asked.append(text) or False
    window.quit_action.trigger()  # Ctrl+Q
    assert asked and "queued job is running" in asked[0] and window.isVisible()
    window.confirm_quit = lambda text: True
    window.quit_action.trigger()
    assert not window.isVisible()


def test_texts_that_were_clipped_are_read_whole(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Issue 30: the Hires steps ("same steps"), the Queue buttons and the empty library's hint were
    cut in their docks."""
    from app.gui.dock_layout import WIDE
    from app.gui.workflow_hires import HiresControls

    hires = HiresControls()
    qtbot.addWidget(hires)
    hires.resize(WIDE["generate"] - 120, hires.sizeHint().height())  # its share of the Generate panel
    hires.show()
    hires.enabled.setChecked(True)
    assert hires.steps.width() >= hires.steps.sizeHint().width()
    panel = GeneratePanel()
    qtbot.addWidget(panel)
    assert panel.minimumSizeHint().width() <= WIDE["generate"]  # still fits its column


def test_the_docked_memory_panel_reads_in_a_narrow_dock_and_its_axis_stays_in_seconds(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Issue 30: docked, the decisions read one or two words a line and the axis said "time (ks)"."""
    from app.backend.monitor import MemoryMonitor
    from app.gui.memory_panel import MemoryPanel

    panel = MemoryPanel(MemoryMonitor(None))
    qtbot.addWidget(panel)
    panel.resize(380, 700)  # a side dock
    panel.show()
    assert panel.split.orientation() == Qt.Orientation.Vertical
    assert panel.events.width() > 300  # the decisions get the panel's width
    panel.resize(1200, 500)  # the Memory workspace
    assert panel.split.orientation() == Qt.Orientation.Horizontal
    axis = panel.plot.getPlotItem().getAxis("bottom")
    axis.setRange(0, 5000)  # after well over an hour
    assert "(s)" in axis.labelString() and "ks" not in axis.labelString()
