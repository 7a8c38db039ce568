"""Every dock of the Create workspace is readable on the screens artists have (1366 x 768 at 100 %,
1920 x 1080 at 150 % = 1280 x 720 logical), from the widgets' geometry in the default layout at the
size a first launch opens at: no dock scrolls sideways, the LoRA card's two strengths are whole in
view, and a LoRA strength's value sits over the slider's handle, following it, and can be typed."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication, QDoubleSpinBox, QScrollArea, QStyle, QStyleOptionSlider

from app.demo import DemoLibrary
from app.gui.dock_layout import initial_size_for
from app.gui.lora_panel import StrengthControl
from app.gui.theme import apply_theme
from tests.app.test_first_launch import SCREENS, inside
from tests.app.test_generate_window import _load
from tests.app.util import strict


def _handle_x(control: StrengthControl) -> int:
    slider = control.slider
    option = QStyleOptionSlider()
    option.initFrom(slider)
    option.orientation = slider.orientation()
    option.minimum, option.maximum = slider.minimum(), slider.maximum()
    option.sliderPosition = option.sliderValue = slider.value()
    option.subControls = QStyle.SubControl.SC_SliderGroove | QStyle.SubControl.SC_SliderHandle
    rect = slider.style().subControlRect(
        QStyle.ComplexControl.CC_Slider, option, QStyle.SubControl.SC_SliderHandle, slider
    )
    return slider.mapTo(control, rect.center()).x()


def _value_span(control: StrengthControl) -> tuple[int, int]:
    left = control.spin.mapTo(control, QPoint(0, 0)).x()
    return left, left + control.spin.width()


def _text_fits(spin: QDoubleSpinBox) -> bool:
    """The number is shown whole in its box (not eaten by the theme's padding and arrow room)."""
    edit = spin.lineEdit()
    return edit.isVisible() and edit.width() >= edit.fontMetrics().horizontalAdvance(spin.text()) + 2


def test_the_strength_value_follows_the_handle_and_can_be_typed(qtbot) -> None:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    apply_theme(app, True)  # the window's stylesheet: the value must still show whole
    control = StrengthControl(-1.0, 2.0, "Model")
    qtbot.addWidget(control)
    control.resize(280, control.sizeHint().height())
    control.show()
    qtbot.waitExposed(control)
    spans = {}
    for value in (-1.0, -0.25, 0.65, 1.0, 1.7, 2.0):
        control.set_value(value)
        left, right = _value_span(control)
        handle = _handle_x(control)
        assert left <= handle <= right, (value, left, handle, right)  # the value is over the handle
        assert control.spin.text() == f"{value:.2f}" and _text_fits(control.spin)
        title = control.title.geometry() if hasattr(control, "title") else None
        assert title is None or not title.intersects(control.spin.geometry())
        spans[value] = left
    assert spans[2.0] - spans[-1.0] > 150  # it travels with the handle across the card
    # dragging: the value follows the hand
    control.slider.setSliderDown(True)
    control.slider.setValue(30)
    assert control.spin.text() == "0.30"
    left, right = _value_span(control)
    assert left <= _handle_x(control) <= right
    control.slider.setSliderDown(False)
    # typed where it is shown: committed, and the handle goes there
    control.spin.lineEdit().selectAll()
    with qtbot.waitSignal(control.committed) as done:
        qtbot.keyClicks(control.spin.lineEdit(), "1.35")
        qtbot.keyClick(control.spin.lineEdit(), Qt.Key.Key_Return)
    assert done.args == [1.35] and control.slider.value() == 135
    left, right = _value_span(control)
    assert left <= _handle_x(control) <= right


def test_every_dock_is_readable_on_a_laptop_screen(qtbot, make_window, demo_library: DemoLibrary) -> None:
    window = make_window(demo_library.folder)
    _load(qtbot, window, demo_library.checkpoint)
    with strict(qtbot, window.backend, "started", "stack_changed", "finished"):
        window.add_lora(demo_library.lora)
    for name in ("1366x768@100%", "1920x1080@150%"):
        window.resize(initial_size_for(SCREENS[name]))
        window.layout_.arrange()
        qtbot.wait(50)
        for key, dock in window.docks.items():
            area = dock.widget()
            assert isinstance(area, QScrollArea)
            if not dock.isVisible() or dock.visibleRegion().isEmpty():
                continue  # a tab behind another
            bar = area.horizontalScrollBar()
            assert bar.maximum() == 0, (name, key, "scrolls sideways by", bar.maximum())
        (card,) = window.lora_panel.cards.values()
        for strength in (card.model, card.clip):  # both strengths whole, without scrolling
            assert inside(strength.slider, window) and inside(strength.spin, window), name
            assert _text_fits(strength.spin), name
        for spin in (window.lora_panel.lo_spin, window.lora_panel.hi_spin):
            assert _text_fits(spin), name
        # the library lists more than a handful of files in the Create workspace
        tree = window.browser.tree
        rows = tree.viewport().height() // max(1, tree.sizeHintForRow(0))
        assert rows >= 5, (name, rows)
        # and a file's name whole in its column (".safetensors" left off in this narrow list)
        index = window.browser.model.index_of(str(demo_library.checkpoint))
        text = window.browser.model.data(index)
        room = tree.visualRect(index).width() - tree.iconSize().width() - 8
        assert demo_library.checkpoint.stem in text, name
        assert tree.fontMetrics().horizontalAdvance(text) <= room, (name, text, room)
        assert inside(window.generate_panel.generate_button, window), name
