"""The LoRA stack panel: one card per LoRA with model and text-encoder strength sliders.

A view over the backend's stack: it shows the worker's :class:`StackInfo` snapshots and sends
changes back. A slider moving calls ``backend.preview_strength`` (the engine's instant low-rank
path, coalesced); releasing it, or typing a value, calls ``backend.bake_strength`` (baked on the
worker). LoRA files can be dropped here from the browser.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QSizePolicy,
    QSlider,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import LoraInfo, StackInfo
from app.gui.theme import set_icon
from app.gui.widgets import ElidedLabel, StatusText
from app.lora_words import trained_scale_text, trained_strengths
from core.detect.types import TrainedScale

SCALE = 100  # slider steps per 1.0 of strength


class StrengthControl(QWidget):
    """A number to type (0.01 steps) above a slider as wide as the card (1 px is about 0.01 in a
    side panel, not 0.03); double-click the slider for 1.0. ``moved`` while dragging, ``committed``
    when the value is final (slider released, arrow keys, a typed number, the reset)."""

    moved = Signal(float)
    committed = Signal(float)
    MIN_SLIDER = 200

    def __init__(self, lo: float, hi: float, title: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setPageStep(5)
        self.slider.setMinimumWidth(self.MIN_SLIDER)
        self.slider.setToolTip(
            "Drag, or use the arrow keys (0.01) and Page Up/Down (0.05); double-click for 1.0"
        )
        self.slider.installEventFilter(self)
        self.spin = QDoubleSpinBox()
        self.spin.setDecimals(2)
        self.spin.setSingleStep(0.01)
        self.spin.setKeyboardTracking(False)
        self.spin.setFixedWidth(76)
        self.set_range(lo, hi)
        self.slider.valueChanged.connect(self._slider_changed)
        self.slider.sliderReleased.connect(lambda: self.committed.emit(self.value()))
        self.spin.valueChanged.connect(self._spin_changed)
        reset = QToolButton(text="1.0", toolTip="Back to 1.0", autoRaise=True)
        reset.clicked.connect(lambda: self.spin.setValue(1.0))
        head = QHBoxLayout()
        head.addWidget(QLabel(title))
        head.addStretch(1)
        head.addWidget(reset)
        head.addWidget(self.spin)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(head)
        layout.addWidget(self.slider)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.slider and event.type() == QEvent.Type.MouseButtonDblClick:
            self.spin.setValue(1.0)
            return True
        return False

    def value(self) -> float:
        return round(self.spin.value(), 2)

    def set_range(self, lo: float, hi: float) -> None:
        value = self.spin.value()
        lo, hi = min(lo, value), max(hi, value)  # never clip a strength the engine holds
        self.slider.blockSignals(True)
        self.spin.blockSignals(True)
        self.slider.setRange(round(lo * SCALE), round(hi * SCALE))
        self.spin.setRange(lo, hi)
        self.slider.setValue(round(value * SCALE))
        self.slider.blockSignals(False)
        self.spin.blockSignals(False)

    def set_value(self, value: float) -> None:
        if self.slider.isSliderDown():
            return  # the user's hand wins over an echo from the worker
        if not self.spin.minimum() <= value <= self.spin.maximum():
            self.set_range(min(value, self.spin.minimum()), max(value, self.spin.maximum()))
        self.spin.blockSignals(True)
        self.slider.blockSignals(True)
        self.spin.setValue(value)
        self.slider.setValue(round(value * SCALE))
        self.spin.blockSignals(False)
        self.slider.blockSignals(False)

    def _slider_changed(self, steps: int) -> None:
        value = steps / SCALE
        self.spin.blockSignals(True)
        self.spin.setValue(value)
        self.spin.blockSignals(False)
        (self.moved if self.slider.isSliderDown() else self.committed).emit(value)

    def _spin_changed(self, value: float) -> None:
        self.slider.blockSignals(True)
        self.slider.setValue(round(value * SCALE))
        self.slider.blockSignals(False)
        self.committed.emit(round(value, 2))


class LoraCard(QFrame):
    def __init__(self, info: LoraInfo, panel: LoraStackPanel) -> None:
        super().__init__()
        self.setObjectName("loraCard")
        self.lora_id = info.id
        self.panel = panel
        self.enabled = QCheckBox()
        self.enabled.setToolTip(f"{info.path}\nUntick to switch this LoRA off without removing it")
        self.name = ElidedLabel(info.name)  # a long name ends in "…" (full name in the tooltip)
        self.name.setToolTip(f"{info.name}\n{info.path}")
        self.name.setStyleSheet("font-weight: 600;")
        self.enabled.toggled.connect(lambda on: panel.backend.set_enabled(self.lora_id, on))
        self.counts = QLabel()
        self.counts.setObjectName("muted")
        self.counts.setWordWrap(True)
        self.warning = QLabel()
        self.warning.setObjectName("warning")
        self.warning.setWordWrap(True)
        self.trained = QLabel()  # a PEFT file's alpha / r from its metadata: the strength to set
        self.trained.setObjectName("muted")
        self.trained.setWordWrap(True)
        self.trained_scale: tuple[TrainedScale, ...] = ()
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._context_menu)
        self.model = StrengthControl(panel.lo, panel.hi, "Model")
        self.clip = StrengthControl(panel.lo, panel.hi, "Text encoder")
        self.model.moved.connect(lambda _v: self._send(False))
        self.clip.moved.connect(lambda _v: self._send(False))
        self.model.committed.connect(lambda _v: self._send(True))
        self.clip.committed.connect(lambda _v: self._send(True))
        head = QHBoxLayout()
        head.addWidget(self.enabled)
        head.addWidget(self.name, 1)
        for name, tip, slot in (
            ("up", "Move up (applied first)", lambda: panel.move(self.lora_id, -1)),
            ("down", "Move down", lambda: panel.move(self.lora_id, 1)),
            ("remove", "Remove from the stack", lambda: panel.backend.remove_lora(self.lora_id)),
        ):
            button = QToolButton(toolTip=tip, autoRaise=True)
            set_icon(button, name)
            button.clicked.connect(slot)
            head.addWidget(button)
        grid = QVBoxLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.model)
        grid.addWidget(self.clip)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.setSpacing(4)
        layout.addLayout(head)
        layout.addWidget(self.counts)
        layout.addWidget(self.warning)
        layout.addWidget(self.trained)
        layout.addLayout(grid)
        self.update_info(info)

    def _send(self, bake: bool) -> None:
        send = self.panel.backend.bake_strength if bake else self.panel.backend.preview_strength
        send(self.lora_id, self.model.value(), self.clip.value())

    def update_info(self, info: LoraInfo) -> None:
        self.enabled.blockSignals(True)
        self.enabled.setChecked(info.enabled)
        self.enabled.blockSignals(False)
        self.model.set_value(info.model_strength)
        self.clip.set_value(info.clip_strength)
        self.clip.setEnabled(any(t.startswith("text_encoder") for t in info.targets))
        self.clip.setToolTip("" if self.clip.isEnabled() else "This LoRA does not patch the text encoder")
        counts = f"{info.matched} modules matched · {info.unmatched} unmatched"
        if info.skipped:
            counts += f" · {info.skipped} skipped"
        if info.shape_mismatches:
            counts += f" · {info.shape_mismatches} wrong shape"
        fam = info.base_family or "unknown base"
        self.counts.setText(f"{counts}  ({info.format}, for {fam})")
        warnings = [info.family_warning] if info.family_warning else []
        if info.unmatched and not info.matched:
            warnings.append("nothing in this LoRA matches the loaded model")
        self.warning.setText("⚠ " + "; ".join(warnings) if warnings else "")
        self.warning.setVisible(bool(warnings))
        self.setProperty("disabledLora", not info.enabled)
        self._show_trained(info.trained_scale)

    def _show_trained(self, scales: tuple[TrainedScale, ...]) -> None:
        self.trained_scale = scales
        text = trained_scale_text(scales)
        self.trained.setText(f"ⓘ {text}" if text else "")
        self.trained.setToolTip(
            "The file's metadata (PEFT lora_alpha / r) says it was trained at this scale. ComfyUI "
            "ignores it and applies the LoRA at scale 1, and Loadout does the same, so the same "
            "settings give the same picture. Right-click the card for “Use trained strength”."
            if text
            else ""
        )
        self.trained.setVisible(bool(text))

    def context_menu(self) -> QMenu | None:
        """The card's right-click menu; None when it would have nothing to do."""
        if not self.trained_scale:
            return None
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        action = menu.addAction("Use trained strength")
        action.setToolTip(trained_scale_text(self.trained_scale))
        action.triggered.connect(self.use_trained_strength)
        return menu

    def _context_menu(self, pos: QPoint) -> None:
        menu = self.context_menu()
        if menu is not None:
            menu.popup(self.mapToGlobal(pos))

    def use_trained_strength(self) -> None:
        """Set the strengths its metadata's alpha / r stand for (the trained effect) and bake."""
        model, clip = trained_strengths(self.trained_scale)
        if model is None and clip is None:
            return
        if model is not None:
            self.model.set_value(model)
        if clip is not None and self.clip.isEnabled():
            self.clip.set_value(clip)
        self._send(True)


class LoraStackPanel(QWidget):
    files_dropped = Signal(list)  # list[Path]
    range_changed = Signal(float, float)

    def __init__(
        self, backend: Backend, lo: float = -1.0, hi: float = 2.0, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.backend = backend
        self.lo, self.hi = lo, hi
        self.info = StackInfo(None)
        self.cards: dict[str, LoraCard] = {}
        self.setAcceptDrops(True)
        self.heading = QLabel()
        self.heading.setObjectName("muted")
        self.heading.setWordWrap(True)
        self.lo_spin = self._range_spin(lo)
        self.hi_spin = self._range_spin(hi)
        ranges = QHBoxLayout()
        ranges.addWidget(QLabel("Slider range"))
        ranges.addWidget(self.lo_spin)
        ranges.addWidget(QLabel("to"))
        ranges.addWidget(self.hi_spin)
        ranges.addStretch(1)
        self.list = QVBoxLayout()
        self.list.setSpacing(8)
        self.list.addStretch(1)
        inner = QWidget()
        inner.setLayout(self.list)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(inner)
        # where the stack applies, in two lines at most (the whole sentence in the tooltip): the
        # cards and their sliders keep the room
        self.status = StatusText()
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)
        self.status.setFixedHeight(2 * self.status.fontMetrics().lineSpacing() + 4)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        scroll.setMinimumHeight(150)  # one card's strengths whole, never an 80 px strip
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.heading)
        layout.addLayout(ranges)
        layout.addWidget(scroll, 1)
        layout.addWidget(self.status)
        backend.stack_changed.connect(self.show_stack)
        self.show_stack(self.info)

    def _range_spin(self, value: float) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setRange(-10.0, 10.0)
        spin.setSingleStep(0.5)
        spin.setDecimals(1)
        spin.setValue(value)
        spin.setKeyboardTracking(False)
        spin.valueChanged.connect(self._range_edited)
        return spin

    def _range_edited(self) -> None:
        lo, hi = self.lo_spin.value(), self.hi_spin.value()
        if lo >= hi:
            return
        self.set_range(lo, hi)
        self.range_changed.emit(lo, hi)

    def set_range(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi
        for spin, value in ((self.lo_spin, lo), (self.hi_spin, hi)):
            spin.blockSignals(True)
            spin.setValue(value)
            spin.blockSignals(False)
        for card in self.cards.values():
            card.model.set_range(lo, hi)
            card.clip.set_range(lo, hi)

    def show_stack(self, info: StackInfo) -> None:
        self.info = info
        ids = [lora.id for lora in info.loras]
        if ids != list(self.cards):
            for card in self.cards.values():
                self.list.removeWidget(card)
                card.deleteLater()
            self.cards = {}
            for lora in info.loras:
                card = LoraCard(lora, self)
                self.cards[lora.id] = card
                self.list.insertWidget(self.list.count() - 1, card)
        else:
            for lora in info.loras:
                self.cards[lora.id].update_info(lora)
        if info.model_family is None:
            self.heading.setText(
                "Load a checkpoint, then add LoRAs from the browser (button or drag them here)."
            )
        elif not info.loras:
            self.heading.setText(f"No LoRAs on the {info.model_family} model yet: add one from the browser.")
        else:
            self.heading.setText(
                f"{len(info.loras)} LoRA(s) on the {info.model_family} model, applied top to bottom."
            )
        if info.loras:
            state = "previewing (bakes when you release the slider)" if not info.baked else info.applied
            extra = (
                f" · {info.recomputed_keys} weights recomputed" if info.baked and info.recomputed_keys else ""
            )
            self.status.setText(state + extra)
        else:
            self.status.setText("")

    def move(self, lora_id: str, delta: int) -> None:
        order = [lora.id for lora in self.info.loras]
        i = order.index(lora_id)
        j = i + delta
        if 0 <= j < len(order):
            order[i], order[j] = order[j], order[i]
            self.backend.reorder(order)

    # -- drops from the browser ------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            self.files_dropped.emit(paths)
            event.acceptProposedAction()
