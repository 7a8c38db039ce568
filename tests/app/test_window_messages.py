"""Issue 18's message and control bugs, each on the real widgets: Stop's leftovers, a PNG without
parameters, Load to GPU that does not fit, the size preset, the LoRA strength control and names,
captions that never move the layout, the sweep's text-encoder choice, the loaded-models table,
the memory panel's reasons, legend and markers, notes that are not warnings."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from app.backend.messages import MAIN_KEY
from app.backend.monitor import MemoryMonitor
from app.backend.placement import Placement
from app.demo import DemoLibrary
from app.gui.generate_panel import GeneratePanel
from app.gui.lora_panel import StrengthControl
from app.gui.memory_panel import EventList, MemoryPanel
from core.detect.catalog import generation_defaults
from core.generate.parameters import GenerationParameters, format_parameters
from core.generate.png import save_png
from tests.app.test_generate_window import _load
from tests.app.test_placement import card
from tests.app.util import strict


def test_stop_says_stopped_and_the_banner_leaves_with_the_next_run(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder)
    panel = window.generate_panel
    _load(qtbot, window, demo_library.checkpoint)
    panel.prompt.setPlainText("a fox")
    panel.steps.setValue(60)
    panel.width_.setValue(64)
    panel.height_.setValue(64)

    def stop_at_the_first_step(p) -> None:
        if p.phase == "sample" and p.step >= 1:
            window.backend.generate_progress.disconnect(stop_at_the_first_step)  # one Esc
            window.interrupt()

    window.backend.generate_progress.connect(stop_at_the_first_step)
    with strict(qtbot, window.backend, "started", "interrupted", "finished", timeout=120000):
        panel.generate_button.click()
    qtbot.wait(20)
    assert "Sampling" not in panel.status.text() and panel.status.text().startswith("Stopped")
    assert window.message.isVisible() and "Stopped" in window.message.text.text()
    banner_at_start: list[bool] = []
    window.backend.started.connect(lambda _task: banner_at_start.append(window.message.isVisible()))
    panel.steps.setValue(2)
    with strict(qtbot, window.backend, "started", "generated", "finished", timeout=120000):
        panel.generate_button.click()
    assert banner_at_start == [False]  # the banner belonged to the run before
    assert panel.status.text().startswith("Done")


def test_a_png_without_parameters_says_so(qtbot, make_window, tmp_path: Path) -> None:
    window = make_window()
    plain = tmp_path / "photo.png"
    image = QImage(16, 16, QImage.Format.Format_RGB32)
    image.fill(0x336699)
    assert image.save(str(plain))
    window.generate_panel.read_picture(plain)
    text = window.message.text.text()
    assert "No parameters in the picture" in text and "failed" not in text, text


def test_load_to_gpu_that_does_not_fit_says_what_and_that_generating_streams_it(
    qtbot, make_window, demo_library: DemoLibrary
) -> None:
    window = make_window(demo_library.folder, placement=Placement(None, card(3)))
    _load(qtbot, window, demo_library.checkpoint)
    with strict(qtbot, window.backend, "started", "failed", "finished"):
        window.backend.place(MAIN_KEY)
    text = window.message.text.text()
    assert "Does not fit on the GPU" in text and "Out of memory" not in text
    assert "</b> Not enough GPU memory for all of loadout-demo-sd15-tiny" in text  # its own sentence
    assert "streams to the GPU layer by layer" in text and window.message.level == "info"


def test_a_typed_size_that_is_no_preset_says_custom(qtbot) -> None:
    panel = GeneratePanel()
    qtbot.addWidget(panel)
    panel.set_family("sd1", generation_defaults("sd1"))
    assert panel.size.currentText() == "512×512"
    panel.width_.setValue(256)
    panel.height_.setValue(256)
    assert panel.size.currentText() == "custom"
    panel.width_.setValue(512)
    panel.height_.setValue(768)
    assert panel.size.currentText() == "512×768"
    panel.size.setCurrentIndex(0)
    assert (panel.width_.value(), panel.height_.value()) == (512, 512)


def test_the_strength_control_is_precise_and_double_click_resets_it(qtbot) -> None:
    control = StrengthControl(-1.0, 2.0, "Model")
    qtbot.addWidget(control)
    control.resize(300, 60)
    control.show()
    control.set_value(0.35)
    assert control.slider.width() >= StrengthControl.MIN_SLIDER  # -1..2 over 200+ px, not 115
    assert control.spin.singleStep() == 0.01
    with qtbot.waitSignal(control.committed) as done:
        qtbot.mouseDClick(control.slider, Qt.MouseButton.LeftButton)
    assert done.args == [1.0] and control.value() == 1.0


def test_a_long_lora_name_is_cut_with_an_ellipsis_not_widening_the_panel(
    qtbot, make_window, demo_library: DemoLibrary, tmp_path: Path
) -> None:
    long = tmp_path / ("inkwash_" + "very_long_style_name_" * 6 + "v3.safetensors")
    shutil.copy(demo_library.lora, long)
    window = make_window(demo_library.folder)
    _load(qtbot, window, demo_library.checkpoint)
    with strict(qtbot, window.backend, "started", "stack_changed", "finished"):
        window.add_lora(long)
    (card_,) = window.lora_panel.cards.values()
    assert card_.name.text() == long.name and long.name in card_.name.toolTip()
    assert card_.minimumSizeHint().width() < 400
    assert card_.name.width() < card_.name.fontMetrics().horizontalAdvance(long.name)  # cut, with "…"


def test_captions_never_move_the_layout(qtbot, make_window, tmp_path: Path) -> None:
    window = make_window()
    viewer, panel = window.picture, window.generate_panel
    qtbot.wait(20)
    view_height, button_y = viewer.view.height(), panel.generate_button.y()
    long = format_parameters(GenerationParameters(prompt="a castle " * 60, negative="fog " * 40, seed=3))
    path = save_png(tmp_path / "a.png", np.zeros((8, 8, 3), np.uint8), long)
    viewer.show_image(path, long)
    panel.status.setText("Done: 0.12 s/step; " + "text encode 0.1 s, sample 1.0 s, decode 0.2 s. " * 5)
    qtbot.wait(20)
    assert viewer.view.height() == view_height and panel.generate_button.y() == button_y
    assert panel.status.height() == panel.status.minimumHeight() == panel.status.maximumHeight()


def test_the_panel_sends_the_sweeps_text_encoder_choice(qtbot) -> None:
    panel = GeneratePanel()
    qtbot.addWidget(panel)
    panel.set_available(True)
    panel.set_loras((("id1", "style"),))
    panel.sweep_lora.setCurrentIndex(1)
    assert panel.sweep_target.currentText() == "model and text encoder"  # as an A1111 <lora:x:s> tag
    panel.sweep_target.setCurrentIndex(1)
    with qtbot.waitSignal(panel.sweep_requested) as sent:
        panel.generate()
    assert sent.args[1].x.name == "lora-model-strength" and sent.args[1].lora == "id1"  # the TE stays
    panel.sweep_lora.setCurrentIndex(panel.sweep_lora.findText("ControlNet 0 strength"))
    panel.sweep_values.setText("0.5, 1")
    with qtbot.waitSignal(panel.sweep_requested) as sent:
        panel.generate()
    assert (sent.args[1].x.name, sent.args[1].x.values) == ("controlnet-strength", (0.5, 1.0))
    panel.sweep_lora.setCurrentIndex(panel.sweep_lora.findText("IP-Adapter weight"))
    with qtbot.waitSignal(panel.sweep_requested) as sent:
        panel.generate()
    assert (sent.args[1].x.name, sent.args[1].x.values) == ("ip-adapter-weight", (0.5, 1.0))
    panel.sweep_lora.setCurrentIndex(panel.sweep_lora.findText("Redux strength"))
    with qtbot.waitSignal(panel.sweep_requested) as sent:
        panel.generate()
    assert (sent.args[1].x.name, sent.args[1].x.values) == ("redux-strength", (0.5, 1.0))


def test_the_loaded_models_table_shows_several_rows_however_short_its_dock(qtbot, make_window) -> None:
    window = make_window()
    tree = window.loaded_panel.tree
    row = tree.fontMetrics().height()
    assert tree.minimumHeight() >= tree.header().sizeHint().height() + 4 * row


def test_a_long_reason_wraps_in_the_event_list(qtbot) -> None:
    events = EventList()
    qtbot.addWidget(events)
    events.resize(320, 400)
    events.show()
    reason = "evicted the text encoder (235 MiB) to fit the diffusion model; " * 4
    events.add_event("evict clip-l", reason, "evict")
    qtbot.wait(20)
    height = events.visualItemRect(events.topLevelItem(0)).height()
    assert height >= 5 * events.fontMetrics().height(), height


def test_the_legend_sits_outside_the_traces_and_markers_of_one_draw_share_one(qtbot) -> None:
    panel = MemoryPanel(MemoryMonitor(None))
    qtbot.addWidget(panel)
    assert panel.plot.getPlotItem().legend is None  # nothing drawn over the traces
    assert "System RAM used" in panel.legend.text() and "Loadout (RSS)" in panel.legend.text()
    for label in ("load", "evict", "placed"):
        panel.plot.add_event(5.0, label, f"{label} because")
    panel.plot.add_event(30.0, "load", "later")
    assert len(panel.plot.markers) == 2
    first = panel.plot.markers[0][1]
    assert first.label.textItem.toPlainText() == "load +2" and "evict because" in first.toolTip()
    panel.plot.timer.stop()


def test_a_loras_base_model_evidence_is_a_note_not_a_warning(
    qtbot, make_window, real_layout_folder: Path
) -> None:
    lora = real_layout_folder / "models" / "loras" / "watercolor-sd15.safetensors"
    window = make_window(real_layout_folder)
    qtbot.waitUntil(
        lambda: window.browser.select_path(lora) and window.details.entry.status == "ok", timeout=30000
    )
    html = window.details.body.toHtml()
    assert "reads 768-wide text features" in html and "ⓘ" in html and "⚠" not in html


def test_settings_say_what_each_vram_mode_does_on_the_simulated_card(qtbot) -> None:
    from app.gui.settings import AppSettings, SettingsDialog
    from core.memory.devices import nvidia_device
    from core.memory.policy import automatic_vram_state

    dialog = SettingsDialog(AppSettings(simulate_vram_mib=256), None, has_gpu=False)
    qtbot.addWidget(dialog)
    text = dialog.vram_help.text()
    card = nvidia_device(0, "Simulated GPU", 256 * 2**20, (8, 6), simulated=True)
    engine = automatic_vram_state(card, 256 * 2**20).state  # the engine's own pick for this size
    assert f"256 MiB card: Automatic picks {engine.title}" in text
    assert text.count("<li>") == 4  # every mode, for this size
    dialog.simulate.setValue(8192)
    assert "8 GiB card: Automatic picks normal VRAM" in dialog.vram_help.text()
    dialog.vram.setCurrentIndex(dialog.vram.findData("low-vram"))
    assert "Your choice: low VRAM" in dialog.vram_help.text()
    dialog.vram.setCurrentIndex(dialog.vram.findData("no-vram"))
    assert "Nothing stays on the card" in dialog.vram_help.text()


def test_a_simulated_card_in_no_vram_mode_says_why_nothing_stays_placed(qtbot, make_window) -> None:
    from app.backend.placement import PlacementConfig
    from core.memory.policy import MemorySettings, VramState

    settings = MemorySettings(vram_state=VramState.NO_VRAM)
    window = make_window(placement=Placement(None, PlacementConfig(settings, simulate_bytes=256 * 2**20)))

    note = window.memory_panel.note.text()
    assert "no-vram" in note and "nothing stays placed" in note and "Normal VRAM" in note


def test_every_long_task_shows_its_progress_in_the_status_bar(qtbot, make_window) -> None:
    from app.backend.messages import TaskProgress

    window = make_window()
    window.backend.started.emit("scan")  # reading folders: a progress bar too, not only loads
    assert window.task_progress.isVisibleTo(window) and window.task_label.text() == "Reading model folders…"
    window.backend.progress.emit(TaskProgress("scan", 3, 12, "Reading 3 of 12 files"))
    assert window.task_progress.value() == 250 and window.task_label.text() == "Reading 3 of 12 files"
    window.status.busy(False)
    assert not window.task_progress.isVisibleTo(window)
