"""The LoRA stack panel: one card per LoRA with model and text-encoder strength sliders.

A view over a :class:`~app.gui.stack_model.StackModel` (the worker's :class:`StackInfo` snapshots
and the edits it may ask for; never the backend). A slider moving previews its strength (the
engine's instant low-rank path, coalesced); releasing it, or typing a value, bakes it (on the
worker). LoRA files can be dropped here from the browser.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.backend.messages import LoraInfo, StackInfo
from app.gui.lora_options import LoraOptionsRow
from app.gui.stack_model import StackModel
from app.gui.strength_control import BARE_NUMBER, StrengthControl
from app.gui.theme import set_icon
from app.gui.widgets import ElidedLabel
from app.lora_words import trained_scale_text, trained_strengths
from core.detect.types import TrainedScale


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
        self.enabled.toggled.connect(lambda on: panel.stack.set_enabled(self.lora_id, on))
        self.counts = ElidedLabel()  # one line: the strengths keep the room (all of it in the tooltip)
        self.counts.setObjectName("muted")
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
        head = self._head(panel)
        self.options = LoraOptionsRow(lambda lbw, on: panel.stack.set_options(self.lora_id, lbw, on))
        self.options.setVisible(False)
        self.more.toggled.connect(self.options.setVisible)
        grid = QVBoxLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.model)
        grid.addWidget(self.clip)
        grid.addWidget(self.options)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(2)
        layout.addLayout(head)
        layout.addWidget(self.counts)
        layout.addWidget(self.warning)
        layout.addWidget(self.trained)
        layout.addLayout(grid)
        self.update_info(info)

    def _head(self, panel: LoraStackPanel) -> QHBoxLayout:
        """The switch, the name, the options toggle, and the move and remove buttons."""
        head = QHBoxLayout()
        head.addWidget(self.enabled)
        head.addWidget(self.name, 1)
        # the options row (prompt, block weights) folds away: the strengths stay in view on a laptop
        self.more = QToolButton(toolTip="Where the LoRA acts and its block weights", autoRaise=True)
        self.more.setText("⋯")
        self.more.setCheckable(True)
        head.addWidget(self.more)
        for name, tip, slot in (
            ("up", "Move up (applied first)", lambda: panel.move(self.lora_id, -1)),
            ("down", "Move down", lambda: panel.move(self.lora_id, 1)),
            ("remove", "Remove from the stack", lambda: panel.stack.remove(self.lora_id)),
        ):
            button = QToolButton(toolTip=tip, autoRaise=True)
            set_icon(button, name)
            button.clicked.connect(slot)
            head.addWidget(button)
        return head

    def _send(self, bake: bool) -> None:
        self.panel.stack.set_strength(self.lora_id, self.model.value(), self.clip.value(), bake=bake)

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
        self.options.show_options(self.panel.info.model_family, info.block_weights, info.on)
        if info.on is not None or info.block_weights:
            self.more.setChecked(True)  # options that are set are shown

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
        self, stack: StackModel, lo: float = -1.0, hi: float = 2.0, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.stack = stack
        self.lo, self.hi = lo, hi
        self.info = StackInfo(None)
        self.cards: dict[str, LoraCard] = {}
        self.setAcceptDrops(True)
        # one line above the cards: what the stack is on, and the sliders' range (it says the rest
        # in its tooltip); the hint before anything is on the stack sits where the cards go
        self.heading = ElidedLabel()
        self.heading.setObjectName("muted")
        self.lo_spin = self._range_spin(lo)
        self.hi_spin = self._range_spin(hi)
        ranges = QHBoxLayout()
        ranges.setSpacing(4)
        ranges.addWidget(self.heading, 1)
        range_label = QLabel("Range")
        range_label.setToolTip("The sliders' range (typed strengths may go past it)")
        ranges.addWidget(range_label)
        ranges.addWidget(self.lo_spin)
        ranges.addWidget(QLabel("to"))
        ranges.addWidget(self.hi_spin)
        self.hint = QLabel()
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        self.hint.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.list = QVBoxLayout()
        self.list.setSpacing(8)
        self.list.addWidget(self.hint)
        self.list.addStretch(1)
        inner = QWidget()
        inner.setLayout(self.list)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(inner)
        # where the stack applies, one line (the whole sentence in the tooltip): the cards and
        # their sliders keep the room
        self.status = ElidedLabel()
        self.status.setObjectName("muted")
        self.status.hide()
        scroll.setMinimumHeight(self.card_height())  # one card's strengths whole, never an 80 px strip
        self.scroll = scroll
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.setSpacing(6)
        layout.addLayout(ranges)
        layout.addWidget(scroll, 1)
        layout.addWidget(self.status)
        stack.changed.connect(self.show_stack)
        self.show_stack(self.info)

    def _range_spin(self, value: float) -> QDoubleSpinBox:
        spin = QDoubleSpinBox()
        spin.setButtonSymbols(QDoubleSpinBox.ButtonSymbols.NoButtons)  # typed or arrow keys: narrow
        spin.setStyleSheet(BARE_NUMBER)
        spin.setFixedWidth(spin.fontMetrics().horizontalAdvance("-10.0") + 16)
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
            self.heading.setText("No model loaded")
            self.hint.setText(
                "Load a checkpoint, then add LoRAs from the library (double-click, or drag them here)."
            )
        elif not info.loras:
            self.heading.setText(f"No LoRAs on {info.model_family}")
            self.hint.setText(
                f"Add LoRAs for the {info.model_family} model from the library (double-click, or "
                "drag them here)."
            )
        else:
            count = len(info.loras)
            self.heading.setText(f"{count} LoRA{'s' if count != 1 else ''} on {info.model_family}")
            self.heading.setToolTip(
                f"{count} LoRA(s) on the {info.model_family} model, applied top to bottom."
            )
        self.hint.setVisible(not info.loras)
        if info.loras:
            state = "previewing (bakes when you release the slider)" if not info.baked else info.applied
            extra = (
                f" · {info.recomputed_keys} weights recomputed" if info.baked and info.recomputed_keys else ""
            )
            self.status.setText(state + extra)
        else:
            self.status.setText("")
        self.status.setVisible(bool(info.loras))

    def card_height(self) -> int:
        """A card's height with its two strengths (what the stack's scroll area always shows)."""
        probe = StrengthControl(self.lo, self.hi, "Model")
        line = self.fontMetrics().lineSpacing()
        height = 2 * probe.sizeHint().height() + 2 * line + 8 + 16 + 3 * 4
        probe.deleteLater()
        return height

    def move(self, lora_id: str, delta: int) -> None:
        order = [lora.id for lora in self.info.loras]
        i = order.index(lora_id)
        j = i + delta
        if 0 <= j < len(order):
            order[i], order[j] = order[j], order[i]
            self.stack.reorder(order)

    # -- drops from the browser ------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            self.files_dropped.emit(paths)
            event.acceptProposedAction()
