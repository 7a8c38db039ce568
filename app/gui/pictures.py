"""Wires the pictures of the window together: the central viewer, the gallery dock, the sweep grid
and the picture menu; "Use these settings" fills the Generate panel and applies the picture's
LoRAs and strengths to the stack (reading the PNG like a dropped picture is read); "Edit this
picture" fills the first reference slot, and an edit's result is shown beside its originals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QPixmap

from app.gui.errors import Friendly
from app.gui.gallery import PICTURES, GalleryPanel
from app.gui.picture_menu import PictureMenu
from app.gui.viewer import PicturePanel
from core.errors import LoadoutError
from core.generate.events import GeneratedImage, GenerateResult
from core.generate.parameters import GenerationParameters, parse_parameters
from core.generate.picture_settings import PicturePlan, plan_picture_settings
from core.generate.png import read_png_parameters
from core.generate.references import references_in

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


class Pictures(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.viewer = PicturePanel()
        self.gallery = GalleryPanel()
        self.menu = PictureMenu(
            window, self.use_settings, self.deleted, self.viewer.open,
            say=lambda title, text: window.show_message(Friendly(title, text, "warning")),
            edit=self.edit_picture,
        )  # fmt: skip
        self.viewer.menu_requested.connect(self.menu.popup)
        self.gallery.menu_requested.connect(self.menu.popup)
        self.gallery.open_requested.connect(self.show)
        self.pending_loras: list[tuple[Path, float, float]] = []  # a picture's, waiting for a model
        window.backend.model_loaded.connect(lambda _info: self.on_model_loaded())

    def show(self, path: Path) -> None:
        self.viewer.open(path)
        self.window.centralWidget().raise_()

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
        slots = self.window.generate_panel.references.paths()
        originals = [p for p in slots if p.name.replace(",", "") in named]
        if not originals:
            return False
        cells = [GeneratedImage(p, GenerationParameters(""), "", "original") for p in originals]
        self.viewer.show_sweep((*cells, replace(image, label="edited")))
        return True

    def edit_picture(self, path: Path) -> bool:
        """ "Edit this picture": into the first reference slot, the Generate dock raised."""
        if not self.window.generate_panel.references.edit_picture(path):
            return False
        self.window.docks["generate"].show()
        self.window.docks["generate"].raise_()
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
        w = self.window
        pictures = [
            u.toLocalFile() for u in event.mimeData().urls() if u.toLocalFile().lower().endswith(PICTURES)
        ]
        if pictures:
            w.docks["generate"].show()
            w.docks["generate"].raise_()
            w.generate_panel.read_picture(Path(pictures[0]))
            event.acceptProposedAction()

    # -- use these settings ----------------------------------------------------------------------
    def use_settings(self, path: Path) -> None:
        """The picture's prompt and settings to Generate; its model offered when it is not the
        loaded one; its LoRAs made the stack (core.generate.picture_settings decides what that takes)."""
        w = self.window
        try:
            params = parse_parameters(read_png_parameters(path))
        except LoadoutError as exc:
            w.generate_panel.error.emit(exc)
            return
        w.generate_panel.apply_parameters(params)
        w.docks["generate"].show()
        w.docks["generate"].raise_()
        main = next((m for m in w.models if m.is_main), None)
        plan = plan_picture_settings(
            params, main.path if main is not None else None, w.stack.loras, w.browser.model.entries()
        )
        self.carry_out(plan, loaded=main is not None)

    def carry_out(self, plan: PicturePlan, *, loaded: bool) -> None:
        w = self.window
        b = w.backend
        for lora_id in plan.enable:
            b.set_enabled(lora_id, True)
        for lora_id in plan.disable:
            b.set_enabled(lora_id, False)
        for lora_id, model, clip in plan.strengths:
            b.bake_strength(lora_id, model, clip)
        words = []
        if plan.load is not None:
            self.pending_loras = list(plan.add)  # added once the picture's model is loaded
            loras = f" and {len(plan.add)} LoRA{'s' if len(plan.add) != 1 else ''}" if plan.add else ""
            load = plan.load
            text = f"The picture was made with {load.name}{loras} (in your library)."
            if plan.missing:
                text += f" Not in your library: {', '.join(plan.missing)}."
            w.show_message(
                Friendly("Use these settings", text, "info"), ("Load it", lambda: w.load_path(load))
            )
            return
        if loaded:
            for lora_path, model, clip in plan.add:
                b.add_lora(lora_path, model, clip)
        elif plan.add:
            self.pending_loras = list(plan.add)
            words.append("its LoRAs are added once you load a model")
        if plan.model_missing:
            words.append(f"its model {plan.model_missing} is not in your library")
        if plan.missing:
            words.append(f"not in your library: {', '.join(plan.missing)}")
        if words:
            w.show_message(Friendly("Use these settings", f"The picture's {'; '.join(words)}.", "info"))

    def on_model_loaded(self) -> None:
        """A model was loaded: LoRAs a picture's settings were waiting to add go on its stack."""
        pending, self.pending_loras = self.pending_loras, []
        for lora_path, model, clip in pending:
            self.window.backend.add_lora(lora_path, model, clip)
