"""The Generate panel's control picture: what FLUX.1 Canny/Depth [dev], and FLUX.1 [dev] with a
control LoRA on the stack, follow (``core.generate.control_picture``; the CLI's
``--control-picture``). Shown only while the loaded model or an active LoRA (on, strength not 0)
reads one, beside the ControlNet rows: the picture (picked or dropped), the preprocessor that makes
the map from it when the generation runs (none: it is already an edge or depth map) with the map's
thumbnail and Preview… (the ControlNet rows' :class:`~app.gui.hint_preprocessor.PreprocessorPick`),
and a line that says, in the warning colour, when the picture is missing: Generate is then off
(:meth:`ControlPictureBox.missing`, :mod:`app.gui.needed_inputs`). A view: it turns its widgets
into ``ImageSettings.control_picture``; core reads the file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QWidget

from app.gui.controlnet_rows import PICTURES, FilePick
from app.gui.hint_preprocessor import PreprocessorPick
from app.gui.needed_inputs import Missing
from app.gui.picture_drops import dropped_pictures, offers_pictures
from app.gui.theme import colors
from core.generate.control_picture import ControlPictureParameters
from core.generate.request import ImageSettings
from core.generate.workflow_request import ControlPictureUse


class ControlPictureBox(QGroupBox):
    needs_changed = Signal()  # the picture, or the need for one, changed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Control picture", parent)
        self.setAcceptDrops(True)
        self.setToolTip(
            "FLUX.1 Canny/Depth, FLUX.1 control LoRAs and DiffSynth's Qwen-Image union LoRA follow "
            "this picture: an edge, depth or pose map, or a photo the preprocessor makes one from"
        )
        self.picture = FilePick(
            "Pick the control picture (an edge or depth map, or a photo)", PICTURES, preview=True
        )
        self.pre = PreprocessorPick()
        self.picture.changed.connect(self.pre.set_picture)
        self.picture.changed.connect(lambda _path: self._show_note())
        self.picture.changed.connect(lambda _path: self.needs_changed.emit())
        self.pre.combo.currentIndexChanged.connect(lambda _i: self._show_note())
        self.folders: list[Path] = []  # where control pictures were chosen from, the latest first
        self.picture.changed.connect(self._remember)
        self.note = QLabel(wordWrap=True)
        form = QFormLayout(self)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        form.addRow("Picture", self.picture)
        form.addRow("Make", self.pre)
        form.addRow(self.note)
        self.model_reads = False  # the loaded model reads one of its own (FLUX.1 Canny/Depth)
        self.loras: tuple[str, ...] = ()  # the active control LoRAs on the stack, by name
        self._update()

    @property
    def needed(self) -> bool:
        """Whether the loaded model or an active LoRA reads a control picture."""
        return self.model_reads or bool(self.loras)

    def set_model(self, reads: bool) -> None:
        """The loaded model reads a control picture of its own (``ModelInfo.control_picture``)."""
        self.model_reads = reads
        self._update()

    def set_loras(self, names: tuple[str, ...]) -> None:
        """The control LoRAs on the stack that are on with a strength (``LoraInfo.control``)."""
        self.loras = names
        self._update()

    def _update(self) -> None:
        self.setVisible(self.needed)
        self._show_note()
        self.needs_changed.emit()

    def missing(self) -> Missing | None:
        """The control picture, while the model or an active LoRA reads one and none is chosen."""
        if not self.needed or self.picture.path is not None:
            return None
        return Missing(
            f"{self._who()} needs a control picture",
            "pick an edge or depth map, or a photo and a preprocessor (canny, depth)",
        )

    def _who(self) -> str:
        if self.model_reads:
            return "The loaded model"
        return f"The control LoRA {self.loras[0]}" if len(self.loras) == 1 else "The control LoRAs"

    def _show_note(self) -> None:
        need = self.missing()
        if not self.needed:
            self.note.setText("")
        elif need is not None:
            self.note.setStyleSheet(f"color: {colors()['warn']}")
            self.note.setText(need.text)
        else:
            self.note.setStyleSheet(f"color: {colors()['muted']}")
            made = f"the {self.pre.name} map of " if self.pre.name else ""
            self.note.setText(f"{self._who()} follows {made}this picture.")

    def _remember(self, path: Path | None) -> None:
        if path is not None:
            self.folders = [path.parent, *(f for f in self.folders if f != path.parent)][:8]

    def use(self) -> ControlPictureUse | None:
        path = self.picture.path
        return ControlPictureUse(path, self.pre.name) if path is not None else None

    def apply(self, settings: ImageSettings) -> ImageSettings:
        """The control picture, while the model or a LoRA reads one (else none: the engine would
        refuse one given to a model that takes none)."""
        return replace(settings, control_picture=self.use() if self.needed else None)

    # -- kept across a relaunch, and read back from a picture --------------------------------------
    def saved(self) -> dict[str, str]:
        path = self.picture.path
        return {"picture": str(path) if path is not None else "", "preprocessor": self.pre.name or ""}

    def restore(self, saved: object) -> None:
        """Put :meth:`saved` back; a picture no longer on disk leaves the slot empty."""
        values = saved if isinstance(saved, dict) else {}
        text, name = values.get("picture"), values.get("preprocessor")
        self.pre.set_name(name if isinstance(name, str) and name else None)
        ok = isinstance(text, str) and text and Path(text).is_file()
        self.picture.set_path(Path(str(text)) if ok else None)

    def show_parameters(self, p: ControlPictureParameters | None) -> None:
        """What a picture's ``Control picture`` names: its preprocessor, and the file when the one
        chosen now has that name or one of that name is in a folder control pictures were chosen
        from (the parameters give the name and hash, not the folder); else the slot is emptied and
        the note names the file."""
        if p is None:
            return
        self.pre.set_name(p.preprocessor)
        current = self.picture.path
        if current is not None and current.name == p.name:
            return
        bare = Path(p.name).name == p.name and p.name not in (".", "..")  # a name, never a path
        found = next((f / p.name for f in self.folders if bare and (f / p.name).is_file()), None)
        self.picture.set_path(found)
        if found is None:
            self.note.setStyleSheet(f"color: {colors()['warn']}")
            self.note.setText(f"The picture followed the control picture {p.name}: pick it here.")

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if offers_pictures(event):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        for path in dropped_pictures(event)[:1]:
            self.picture.set_path(path)
        event.acceptProposedAction()
