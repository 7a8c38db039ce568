"""Wires the pictures of the window together: the central viewer, the gallery dock, the sweep grid
and the picture menu; "Use these settings" fills the Generate panel and applies the picture's
LoRAs and strengths to the stack (reading the PNG like a dropped picture is read); "Edit this
picture" fills the first reference slot, and an edit's result is shown beside its originals.

It is handed what it needs (:class:`PictureHost`: a few callables), never the window: what the
session has loaded is read through them, and the stack is changed by one session operation
(``Backend.change_stack``, planned by ``core.generate.picture_settings``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QPixmap
from PySide6.QtWidgets import QWidget

from app.gui.errors import Friendly
from app.gui.gallery import PICTURES, GalleryPanel
from app.gui.generate_panel import GeneratePanel
from app.gui.picture_menu import PictureMenu
from app.gui.viewer import PicturePanel
from core.errors import LoadoutError
from core.generate.events import GeneratedImage, GenerateResult
from core.generate.parameters import GenerationParameters, parse_parameters
from core.generate.picture_settings import PicturePlan, plan_picture_settings
from core.generate.png import read_png_parameters
from core.generate.references import references_in
from core.library import Entry
from core.session.loras import StackChange
from core.session.snapshots import LoraInfo

Say = Callable[[Friendly, "tuple[str, Callable[[], None]] | None"], None]


@dataclass(frozen=True)
class PictureHost:
    """What the pictures need of the rest of the window, and nothing more."""

    say: Say  # a message, with an optional (button text, action), in the window's message bar
    panel: GeneratePanel  # the Generate panel
    show_panel: Callable[[], None]  # ... brought to the front
    loaded: Callable[[], Path | None]  # the file of the model in the main slot
    stack: Callable[[], Sequence[LoraInfo]]  # its LoRA stack as last reported
    library: Callable[[], Sequence[Entry]]  # the library's files
    change_stack: Callable[[StackChange], None]  # one session operation (Backend.change_stack)
    load: Callable[[Path], None]  # load a library file by its path
    raise_picture: Callable[[], None] = lambda: None  # bring the picture view to the front


class Pictures(QObject):
    def __init__(self, parent: QWidget, host: PictureHost) -> None:
        super().__init__(parent)
        self.host = host
        self.viewer = PicturePanel()
        self.gallery = GalleryPanel()
        self.menu = PictureMenu(
            parent, self.use_settings, self.deleted, self.viewer.open,
            say=lambda title, text: host.say(Friendly(title, text, "warning"), None),
            edit=self.edit_picture,
        )  # fmt: skip
        self.viewer.menu_requested.connect(self.menu.popup)
        self.gallery.menu_requested.connect(self.menu.popup)
        self.gallery.open_requested.connect(self.show)
        self.pending_loras = StackChange()  # a picture's LoRAs (and their options), waiting for a model
        parent.setAcceptDrops(True)  # a picture dropped anywhere on the window
        parent.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if isinstance(event, QDropEvent) and event.type() == QEvent.Type.Drop:
            self.drop(event)
            return True
        if isinstance(event, QDragEnterEvent):
            self.drag_enter(event)
            return True
        return False

    def show(self, path: Path) -> None:
        self.viewer.open(path)
        self.host.raise_picture()

    def on_preview(self, rgb: np.ndarray) -> None:
        self.viewer.show_preview(rgb)

    def on_result(self, result: GenerateResult) -> None:
        images = result.images
        self.gallery.add(images)
        if not images:
            return
        if len(images) > 1 and images[0].role == "grid":
            self.viewer.show_image(images[0].path, images[0].infotext)
            self.viewer.show_sweep(images[1:])
        else:
            self.viewer.show_image(images[0].path, images[0].infotext)
            self.beside_originals(images[0])

    def beside_originals(self, image: GeneratedImage) -> bool:
        """An edit's result beside the pictures it was made from (the sweep view), found among the
        reference slots by the names its parameters give."""
        named = {r.name for r in references_in(image.parameters.extra)}
        slots = self.host.panel.references.paths()
        originals = [p for p in slots if p.name.replace(",", "") in named]
        if not originals:
            return False
        cells = [GeneratedImage(p, GenerationParameters(""), "", "original") for p in originals]
        self.viewer.show_sweep((*cells, replace(image, label="edited")))
        return True

    def edit_picture(self, path: Path) -> bool:
        """ "Edit this picture": into the first reference slot, the Generate dock raised."""
        if not self.host.panel.references.edit_picture(path):
            return False
        self.host.show_panel()
        return True

    def deleted(self, path: Path) -> None:
        self.gallery.remove(path)
        if self.viewer.view.path == path:
            self.viewer.view.show_pixmap(QPixmap())
            self.viewer.caption.setText(f"{path.name} was deleted.")

    # -- a picture dropped anywhere on the window: its settings go to the Generate panel ----------
    def drag_enter(self, event: QDragEnterEvent) -> None:
        if any(u.toLocalFile().lower().endswith(PICTURES) for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def drop(self, event: QDropEvent) -> None:
        pictures = [
            u.toLocalFile() for u in event.mimeData().urls() if u.toLocalFile().lower().endswith(PICTURES)
        ]
        if pictures:
            self.host.show_panel()
            self.host.panel.read_picture(Path(pictures[0]))
            event.acceptProposedAction()

    # -- use these settings ----------------------------------------------------------------------
    def use_settings(self, path: Path) -> None:
        """The picture's prompt and settings to Generate; its model offered when it is not the
        loaded one; its LoRAs made the stack (core.generate.picture_settings decides what that takes)."""
        h = self.host
        try:
            params = parse_parameters(read_png_parameters(path))
        except LoadoutError as exc:
            h.panel.error.emit(exc)
            return
        h.panel.apply_parameters(params)
        h.show_panel()
        loaded = h.loaded()
        self.carry_out(
            plan_picture_settings(params, loaded, h.stack(), h.library()), loaded=loaded is not None
        )

    def carry_out(self, plan: PicturePlan, *, loaded: bool) -> None:
        h = self.host
        if plan.load is not None:  # the picture's model first; its LoRAs once it is loaded
            self.pending_loras = StackChange(add=plan.add, options=plan.options)
            loras = f" and {len(plan.add)} LoRA{'s' if len(plan.add) != 1 else ''}" if plan.add else ""
            load = plan.load
            text = f"The picture was made with {load.name}{loras} (in your library)."
            if plan.missing:
                text += f" Not in your library: {', '.join(plan.missing)}."
            h.say(Friendly("Use these settings", text, "info"), ("Load it", lambda: h.load(load)))
            return
        words = []
        if loaded:
            change = plan.stack_change()
            if change:
                h.change_stack(change)
        elif plan.add:
            self.pending_loras = StackChange(add=plan.add, options=plan.options)
            words.append("its LoRAs are added once you load a model")
        if plan.model_missing:
            words.append(f"its model {plan.model_missing} is not in your library")
        if plan.missing:
            words.append(f"not in your library: {', '.join(plan.missing)}")
        if words:
            h.say(Friendly("Use these settings", f"The picture's {'; '.join(words)}.", "info"), None)

    def on_model_loaded(self) -> None:
        """A model was loaded: LoRAs a picture's settings were waiting to add go on its stack."""
        pending, self.pending_loras = self.pending_loras, StackChange()
        if pending:
            self.host.change_stack(pending)
