"""The Generate panel's guidance patches: a collapsible list (PAG, FreeU, RescaleCFG ...), each
patch switched on by its box and showing its parameters with ComfyUI's defaults. A view: its
widgets are made from the records' own parameter descriptions (:mod:`core.guidance`) and turned
into the records ``ImageSettings`` takes; the checks are the records'."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters
from core.generate.request import ImageSettings
from core.guidance import PATCHES, GuidancePatch, describe_all, read_patches
from core.guidance.base import Choice, Layers, limits_of, parameters
from core.values import NumberRange


def _editor(limits: object, value: Any) -> QWidget:
    if isinstance(value, bool):
        return QCheckBox(checked=value)
    if isinstance(limits, NumberRange) and limits.integer:
        return QSpinBox(minimum=int(limits.lo), maximum=int(limits.hi), value=int(value))
    if isinstance(limits, NumberRange):
        box = QDoubleSpinBox(minimum=limits.lo, maximum=limits.hi, decimals=3, singleStep=0.05)
        box.setValue(float(value))
        return box
    if isinstance(limits, Layers):
        return QLineEdit(",".join(str(n) for n in value))
    assert isinstance(limits, Choice)
    combo = QComboBox()
    combo.addItems(list(limits.options))
    combo.setCurrentText(str(value))
    return combo


def _read(editor: QWidget) -> Any:
    if isinstance(editor, QCheckBox):
        return editor.isChecked()
    if isinstance(editor, QSpinBox | QDoubleSpinBox):
        return editor.value()
    if isinstance(editor, QLineEdit):
        return tuple(int(n) for n in editor.text().replace(" ", ",").split(",") if n.strip().isdigit())
    assert isinstance(editor, QComboBox)
    return editor.currentText()


def _write(editor: QWidget, value: Any) -> None:
    if isinstance(editor, QCheckBox):
        editor.setChecked(bool(value))
    elif isinstance(editor, QSpinBox):
        editor.setValue(int(value))
    elif isinstance(editor, QDoubleSpinBox):
        editor.setValue(float(value))
    elif isinstance(editor, QLineEdit):
        editor.setText(",".join(str(n) for n in value))
    elif isinstance(editor, QComboBox):
        editor.setCurrentText(str(value))


class PatchRow(QWidget):
    """One patch: its on/off box and, while on, its parameters."""

    def __init__(self, record: type[Any], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.record = record
        default = record()
        self.on = QCheckBox(f"{record.title} ({record.name})")
        self.fields = QWidget()
        form = QFormLayout(self.fields)
        form.setContentsMargins(18, 0, 0, 0)
        self.editors: dict[str, QWidget] = {}
        for f in parameters(default):
            editor = _editor(limits_of(f), getattr(default, f.name))
            self.editors[f.name] = editor
            form.addRow(f.name.replace("_", " "), editor)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.on)
        layout.addWidget(self.fields)
        self.fields.setVisible(False)
        self.on.toggled.connect(self.fields.setVisible)

    def patch(self) -> GuidancePatch:
        """The record of the fields (its checks raise LoadoutError on a bad value)."""
        made: GuidancePatch = self.record(**{name: _read(e) for name, e in self.editors.items()})
        return made

    def show_patch(self, patch: GuidancePatch) -> None:
        for name, editor in self.editors.items():
            _write(editor, getattr(patch, name))
        self.on.setChecked(True)


class GuidanceControls(QGroupBox):
    """The list, collapsed while its box is off; patches apply in the list's order, or in the order
    of the picture whose settings were read."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Guidance patches", parent)
        self.setCheckable(True)
        self.setChecked(False)
        self.setToolTip("ComfyUI's model patches: PAG, FreeU, RescaleCFG, CFG-Zero*, APG ...")
        self.list = QWidget()
        rows = QVBoxLayout(self.list)
        rows.setContentsMargins(0, 0, 0, 0)
        self.rows = {name: PatchRow(record) for name, record in PATCHES.items()}
        self.order = list(self.rows)
        for row in self.rows.values():
            rows.addWidget(row)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        self.list.setVisible(False)
        self.toggled.connect(self.list.setVisible)

    def patches(self) -> tuple[GuidancePatch, ...]:
        if not self.isChecked():
            return ()
        return tuple(self.rows[name].patch() for name in self.order if self.rows[name].on.isChecked())

    def apply(self, settings: ImageSettings) -> ImageSettings:
        return replace(settings, guidance_patches=self.patches())

    def apply_parameters(self, p: GenerationParameters) -> None:
        """Switch on the patches a picture was made with, with its values; the others off."""
        self.show_patches(p.patches)

    def show_patches(self, patches: tuple[GuidancePatch, ...]) -> None:
        for row in self.rows.values():
            row.on.setChecked(False)
        for patch in patches:
            self.rows[patch.name].show_patch(patch)
        given = [patch.name for patch in patches]
        self.order = given + [name for name in self.rows if name not in given]
        self.setChecked(bool(patches))

    def use_family(self, previous: tuple[str, ...], usual: tuple[str, ...]) -> None:
        """A model of another family: the patches the previous family switched on are switched
        off, the new family's usual ones on at their defaults (each can be switched off)."""
        if previous == usual:
            return
        for name in previous:
            if name not in usual:
                self.rows[name].on.setChecked(False)
        for name in usual:
            if not self.rows[name].on.isChecked():
                self.rows[name].show_patch(PATCHES[name]())
        self.setChecked(any(row.on.isChecked() for row in self.rows.values()))

    def saved(self) -> str:
        """The patches switched on as text (kept across a relaunch); "" when one has a bad value."""
        try:
            return describe_all(self.patches())
        except LoadoutError:
            return ""

    def restore(self, text: str) -> None:
        try:
            self.show_patches(read_patches(text))
        except LoadoutError:
            self.show_patches(())
