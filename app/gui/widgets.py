"""Small shared widgets."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

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
        self.hide()

    def show_message(self, message: Friendly, action: tuple[str, Callable[[], None]] | None = None) -> None:
        name, color = _LEVEL_ICON.get(message.level, _LEVEL_ICON["error"])
        self.icon.setPixmap(icon(name, color).pixmap(20, 20))
        self.text.setText(f"<b>{message.title}.</b> {message.text}")
        self.level = message.level
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
