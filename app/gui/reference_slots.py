"""The Generate panel's reference pictures (editing: FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit): up to
three slots, each picked with a button or filled by dropping a picture on the box; shown only while
the loaded model's family takes reference pictures (``ModelInfo.references``, its record's number),
with as many slots as it takes (three at most here). "Edit this picture" in a picture's menu fills
the first slot. The slots are kept across a relaunch with the panel's other fields (a picture
gone since is left out). A view: it turns the slots into ``ImageSettings.references``; core reads
the files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QCheckBox, QFormLayout, QGroupBox, QLabel, QWidget

from app.gui.controlnet_rows import PICTURES, FilePick
from app.gui.picture_drops import dropped_pictures, offers_pictures
from core.generate.references import PARAMETER as REFERENCES
from core.generate.references import SIZE_PARAMETER
from core.generate.request import ImageSettings

#: the most slots the panel shows (ComfyUI's Qwen-Image-Edit node takes three)
SLOTS = 3


class ReferenceSlots(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Edit: reference pictures", parent)
        self.setAcceptDrops(True)
        self.setToolTip("Pick or drop the pictures to edit; the prompt says what to change")
        self.slots = [
            FilePick(f"Pick reference picture {i + 1}", PICTURES, preview=True) for i in range(SLOTS)
        ]
        self.note = QLabel()
        self.note.setObjectName("muted")
        self.note.setWordWrap(True)
        self._form = QFormLayout(self)
        self._form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        for i, slot in enumerate(self.slots):
            self._form.addRow(f"Picture {i + 1}", slot)
        self.own_size = QCheckBox("Keep each picture's own size")
        self.own_size.setToolTip(
            "Encode each reference picture at its own size (cropped to the VAE's multiple of 8 or 16 "
            "pixels) instead of the model's usual megapixel scaling: edit at the picture's resolution, "
            "or skip a megapixel of reference tokens on a small picture"
        )
        self._form.addRow(self.own_size)
        self._form.addRow(self.note)
        self.limit = 0
        self.set_limit(0)

    def set_limit(self, most: int) -> None:
        """The loaded family takes ``most`` reference pictures (0: none, the box is hidden)."""
        self.limit = most
        shown = min(most, SLOTS)
        for i in range(SLOTS):
            self._form.setRowVisible(i, i < shown)
        self.note.setText(f"This model takes up to {most} reference pictures." if most else "")
        self.setVisible(most > 0)

    def paths(self) -> tuple[Path, ...]:
        """The filled slots the loaded family takes, in order."""
        shown = self.slots[: min(self.limit, SLOTS)]
        return tuple(s.path for s in shown if s.path is not None)

    def apply(self, settings: ImageSettings) -> ImageSettings:
        paths = self.paths()
        return replace(
            settings, references=paths, reference_own_size=bool(paths) and self.own_size.isChecked()
        )

    def show_parameters(self, extra: dict[str, str]) -> None:
        """A picture's ``Reference size: own`` ticks the box; an edit without it unticks it."""
        if extra.get(REFERENCES):
            self.own_size.setChecked(extra.get(SIZE_PARAMETER) == "own")

    def saved(self) -> list[str]:
        """Every slot's picture ("" for an empty one), shown or not: kept across a relaunch."""
        return [str(s.path) if s.path is not None else "" for s in self.slots]

    def restore(self, saved: object) -> None:
        """Put :meth:`saved` back; a picture no longer on disk leaves its slot empty."""
        values = saved if isinstance(saved, list) else []
        for i, slot in enumerate(self.slots):
            text = values[i] if i < len(values) and isinstance(values[i], str) else ""
            slot.set_path(Path(text) if text and Path(text).is_file() else None)

    def edit_picture(self, path: Path) -> bool:
        """Fill the first slot with ``path`` ("Edit this picture"); False when the loaded model
        takes no reference pictures."""
        if self.limit == 0:
            return False
        self.slots[0].set_path(path)
        return True

    def add_picture(self, path: Path) -> bool:
        """A dropped picture goes to the first empty slot (the last one when all are full)."""
        shown = self.slots[: min(self.limit, SLOTS)]
        if not shown:
            return False
        empty = next((s for s in shown if s.path is None), shown[-1])
        empty.set_path(path)
        return True

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if offers_pictures(event):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        for path in dropped_pictures(event):
            self.add_picture(path)
        event.acceptProposedAction()
