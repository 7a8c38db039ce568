"""Small shared widgets."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStatusBar,
    QToolButton,
    QWidget,
)

from app.backend.messages import TaskProgress
from app.gui.errors import Friendly
from app.gui.theme import icon, set_icon

_LEVEL_ICON = {"error": ("error", "#ff8787"), "warning": ("error", "#fcc419"), "info": ("unknown", "#74c0fc")}


class MessageBar(QFrame):
    """A dismissible line above the panels for errors and notices, with an optional action."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBar")
        self.icon = QLabel()
        self.text = QLabel()
        self.text.setWordWrap(True)
        # a long path in a message wraps or is cut, it never widens the window
        self.text.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.action = QPushButton()
        self.action.hide()
        self.action.clicked.connect(self._run_action)
        close = QToolButton(autoRaise=True, toolTip="Dismiss")
        set_icon(close, "remove")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self.icon)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.action)
        layout.addWidget(close)
        self._callback: Callable[[], None] | None = None
        self.level = ""
        self.title = ""
        self.hide()

    def show_message(self, message: Friendly, action: tuple[str, Callable[[], None]] | None = None) -> None:
        name, color = _LEVEL_ICON.get(message.level, _LEVEL_ICON["error"])
        self.icon.setPixmap(icon(name, color).pixmap(20, 20))
        self.text.setText(f"<b>{message.title}.</b> {message.text}")
        self.level = message.level
        self.title = message.title
        self.setProperty("level", "info" if message.level == "info" else "error")
        self.style().unpolish(self)
        self.style().polish(self)
        if action is None:
            self._callback = None
            self.action.hide()
        else:
            self.action.setText(action[0])
            self._callback = action[1]
            self.action.show()
        self.show()

    def _run_action(self) -> None:
        callback, self._callback = self._callback, None
        self.hide()
        if callback is not None:
            callback()


class StatusText(QLabel):
    """A few wrapped lines of a fixed height; the whole text is also its tooltip, so a long message
    cut at the bottom can still be read."""

    def setText(self, text: str) -> None:  # type: ignore[override]
        super().setText(text)
        self.setToolTip(text)

    def hasHeightForWidth(self) -> bool:
        # a wrapped label reports height-for-width, and then the scroll area around its panel lays
        # the panel out at its *preferred* height (scrolling its foot, the Generate button, away)
        return False


class WrappedLabel(QLabel):
    """A word-wrapped label as tall as its text needs at its width (one line, or more when it is
    long): a layout inside a fixed-size panel does not ask a label for height-for-width."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)

    def setText(self, text: str) -> None:  # type: ignore[override]
        super().setText(text)
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        height = max(self.heightForWidth(max(self.width(), 1)), self.fontMetrics().lineSpacing())
        if height != self.height():
            self.setFixedHeight(height)


class ElidedLabel(QLabel):
    """One line of text cut with "…" to the width it is given: a long name never widens the window
    and the line's height never changes (the full text is in the tooltip)."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.full = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # type: ignore[override]
        self.full = text
        super().setText(text)
        self.setToolTip(text)
        self.update()

    def text(self) -> str:
        return self.full

    def minimumSizeHint(self) -> QSize:
        return QSize(16, self.fontMetrics().height())

    def sizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance(self.full) + 4, self.fontMetrics().height())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        elided = self.fontMetrics().elidedText(self.full, Qt.TextElideMode.ElideRight, self.width())
        painter.drawText(self.rect(), int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), elided)


_STARTED = {
    "scan": "Reading model folders…",
    "load": "Loading…",
    "run": "Test run…",
    "demo": "Preparing the demo library…",
    "memory": "Memory manager at work…",
    "generate": "Generating…",
    "lora": "Changing the LoRA stack…",
    "strength": "Baking the LoRA strength…",
}


class StatusLine:
    """The status bar: what the backend is doing, with a progress bar for every long task, and
    the device on the right."""

    def __init__(self, bar: QStatusBar, device_text: str) -> None:
        self.label = ElidedLabel("Ready")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(220)
        self.progress.setMaximumHeight(12)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.device = QLabel(device_text)
        self.device.setObjectName("muted")
        bar.addWidget(self.label, 1)
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.device)

    def started(self, task: str) -> None:
        self.label.setText(_STARTED.get(task, "Working…"))
        if task != "memory":
            self.progress.setRange(0, 0)
            self.progress.show()

    def progress_(self, p: TaskProgress) -> None:
        if p.text:
            self.label.setText(p.text)
        if p.total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * (p.fraction or 0)))

    def busy(self, busy: bool) -> None:
        if not busy:
            self.progress.hide()
            if self.label.text().endswith("…"):
                self.label.setText("Ready")
