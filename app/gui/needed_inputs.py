"""What Generate waits for: a loaded model, no run in progress, and every input the generation
cannot do without. One mechanism for every "needed input missing" case the panel knows of: each
box that knows one (the control picture a model or a control LoRA reads, a ControlNet's hint, an
image prompt's or Redux's picture, the picture a mask or outpainting starts from) has a
``missing()`` that says what is missing and what to do (:class:`Missing`, or None) and a
``needs_changed`` signal; :class:`GenerateGate` keeps the Generate button disabled while one is
missing, with the words on its tooltip and the status line (in the warning colour), and enables it
again when the input is given or the need goes away. The engine refuses the same cases in words
(``core.generate.control_picture.check_takes``, ``core.generate.controlnet_inpaint.check_hint``):
the window only says so before the click instead of after it; a queued grid still meets the
engine's words."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from PySide6.QtCore import QObject, SignalInstance
from PySide6.QtWidgets import QLabel, QPushButton

from app.gui.theme import colors

READY = "Ready: Ctrl+Enter generates."
TIP = "Generate (Ctrl+Enter)"


@dataclass(frozen=True)
class Missing:
    """An input the generation needs and does not have: ``what`` (a sentence, capitalised) and
    ``fix`` (what to do, lower case)."""

    what: str
    fix: str

    @property
    def text(self) -> str:
        return f"{self.what}: {self.fix}."


class NeedsInput(Protocol):
    """A box that knows of an input the generation needs."""

    @property
    def needs_changed(self) -> SignalInstance: ...

    def missing(self) -> Missing | None: ...


class GenerateGate(QObject):
    """The Generate button's state and the words that say why it is off."""

    def __init__(
        self, button: QPushButton, status: QLabel, sources: Sequence[NeedsInput], reason: str
    ) -> None:
        super().__init__(button)
        self.button, self.status, self.sources = button, status, tuple(sources)
        self.available, self.busy, self.reason = False, False, reason
        self._shown: str | None = None  # the missing input's words the status line shows
        for source in self.sources:
            source.needs_changed.connect(self.refresh)

    def missing(self) -> Missing | None:
        """The first input the generation needs and does not have (boxes in the panel's order)."""
        return next((m for m in (s.missing() for s in self.sources) if m is not None), None)

    @property
    def open(self) -> bool:
        """Whether a click on Generate (or Ctrl+Enter) generates now."""
        return self.available and not self.busy and self.missing() is None

    def set_available(self, available: bool, reason: str = "") -> None:
        """A model that generates is loaded (else ``reason`` says what to load)."""
        self.available = available
        if not available and reason:
            self.status.setText(reason)
            self.reason = reason
        elif available and self.status.text() == self.reason:
            self.status.setText(READY)  # the old reason no longer holds
        self.refresh()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.refresh()

    def refresh(self) -> None:
        """The button, its tooltip and (between runs) the status line, as the inputs are now."""
        need = self.missing() if self.available else None
        self.button.setEnabled(self.available and not self.busy and need is None)
        self.button.setToolTip(need.text if need else TIP if self.available else self.reason)
        if self.busy:
            return  # the status line shows the run's progress
        if need is not None:
            self.status.setText(need.text)
            self.status.setStyleSheet(f"color: {colors()['warn']}")
            self._shown = need.text
        elif self._shown is not None:
            if self.status.text() == self._shown:
                self.status.setText(READY if self.available else self.reason)
            self.status.setStyleSheet("")
            self._shown = None
