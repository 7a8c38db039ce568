"""The Generate panel's LoRA schedules: one line per LoRA of the stack, its strength over the steps
as ComfyUI's hook keyframes (``core.patching.schedule``), collapsed while its box is off."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import QGroupBox, QLabel, QLineEdit, QVBoxLayout, QWidget

from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters
from core.generate.request import ImageSettings
from core.patching.schedule import LoraSchedule, format_schedules, parse_schedule, read_schedules

HINT = "name=1@0, 0.5@0.4, 0@0.8; other=0@0, 1@0.5"


def parse_line(text: str) -> tuple[LoraSchedule, ...]:
    """``name=1@0, 0.5@0.4; other=...`` -> one schedule per LoRA."""
    return tuple(parse_schedule(part) for part in text.split(";") if part.strip())


def line_of(schedules: tuple[LoraSchedule, ...]) -> str:
    return "; ".join(f"{s.lora}={s.text()}" for s in schedules)


class ScheduleControls(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("LoRA schedules", parent)
        self.setCheckable(True)
        self.setChecked(False)
        self.setToolTip(
            "A LoRA's strength over the steps: its strength times MULT from START (0 to 1 of the "
            "sampling) on, as ComfyUI's hook keyframes. The weights change only at the keyframes."
        )
        self.line = QLineEdit()
        self.line.setPlaceholderText(HINT)
        self.problem = QLabel()
        self.problem.setWordWrap(True)
        self.problem.setStyleSheet("color: #c0392b")
        self.problem.setVisible(False)
        self.body = QWidget()
        rows = QVBoxLayout(self.body)
        rows.setContentsMargins(0, 0, 0, 0)
        rows.addWidget(QLabel("name=multiplier@start, ... (the LoRA's file name; ';' between LoRAs)"))
        rows.addWidget(self.line)
        rows.addWidget(self.problem)
        layout = QVBoxLayout(self)
        layout.addWidget(self.body)
        self.body.setVisible(False)
        self.toggled.connect(self.body.setVisible)
        self.line.textChanged.connect(self._check)

    def _check(self) -> None:
        try:
            parse_line(self.line.text())
        except LoadoutError as exc:
            self.problem.setText(exc.what)
            self.problem.setVisible(True)
            return
        self.problem.setVisible(False)

    def schedules(self) -> tuple[LoraSchedule, ...]:
        """The schedules typed (none while the box is off); a bad one is refused in words."""
        return parse_line(self.line.text()) if self.isChecked() else ()

    def apply(self, settings: ImageSettings) -> ImageSettings:
        return replace(settings, lora_schedules=self.schedules())

    def apply_parameters(self, p: GenerationParameters) -> None:
        """The schedules a picture was made with (its ``LoRA schedules`` item); none otherwise."""
        try:
            found = read_schedules(p.extra.get("LoRA schedules", ""))
        except LoadoutError:
            found = ()
        self.line.setText(line_of(found))
        self.setChecked(bool(found))

    def saved(self) -> str:
        """The schedules as their PNG text (kept across a relaunch); "" when the box is off or bad."""
        try:
            return format_schedules(self.schedules())
        except LoadoutError:
            return ""

    def restore(self, text: str) -> None:
        try:
            found = read_schedules(text)
        except LoadoutError:
            found = ()
        self.line.setText(line_of(found))
        self.setChecked(bool(found))
