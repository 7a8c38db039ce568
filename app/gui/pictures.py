"""Wires the pictures of the window together: the central viewer, the gallery dock, the sweep grid
and the picture menu; "Use these settings" fills the Generate panel and applies the picture's
LoRAs and strengths to the stack (reading the PNG like a dropped picture is read)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QObject
from PySide6.QtGui import QPixmap

from app.gui.errors import Friendly
from app.gui.gallery import GalleryPanel
from app.gui.picture_menu import PictureMenu
from app.gui.viewer import PicturePanel
from core.errors import LoadoutError
from core.generate.events import GenerateResult
from core.generate.parameters import GenerationParameters, parse_parameters
from core.generate.png import read_png_parameters

if TYPE_CHECKING:
    from app.gui.main_window import MainWindow


class Pictures(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.viewer = PicturePanel()
        self.gallery = GalleryPanel()
        self.menu = PictureMenu(window, self.use_settings, self.deleted, self.viewer.open)
        self.viewer.menu_requested.connect(self.menu.popup)
        self.gallery.menu_requested.connect(self.menu.popup)
        self.gallery.open_requested.connect(self.show)

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

    def deleted(self, path: Path) -> None:
        self.gallery.remove(path)
        if self.viewer.view.path == path:
            self.viewer.view.show_pixmap(QPixmap())
            self.viewer.caption.setText(f"{path.name} was deleted.")

    # -- use these settings ----------------------------------------------------------------------
    def use_settings(self, path: Path) -> None:
        w = self.window
        try:
            params = parse_parameters(read_png_parameters(path))
        except LoadoutError as exc:
            w.generate_panel.error.emit(exc)
            return
        w.generate_panel.apply_parameters(params)
        w.docks["generate"].show()
        w.docks["generate"].raise_()
        missing = self.apply_loras(params)
        if missing:
            names = ", ".join(missing)
            w.show_message(
                Friendly(
                    "LoRAs not found",
                    f"The picture used {names}: not in your library, or not for the loaded model.",
                    "info",
                )
            )

    def apply_loras(self, params: GenerationParameters) -> list[str]:
        """Make the stack what the picture used: its LoRAs at its strengths (added from the library
        when missing), the others switched off. Returns the names that could not be found."""
        w = self.window
        if not params.loras:
            return []
        if w.stack.model_family is None:
            return [lo.name for lo in params.loras]
        wanted = {lo.name: lo for lo in params.loras}
        on_stack = {lo.path.stem: lo for lo in w.stack.loras}
        for stem, lora in on_stack.items():
            use = wanted.get(stem)
            if use is None:
                if lora.enabled:
                    w.backend.set_enabled(lora.id, False)
                continue
            if not lora.enabled:
                w.backend.set_enabled(lora.id, True)
            w.backend.bake_strength(lora.id, use.model_strength, use.clip_strength)
        files = {
            e.path.stem: e.path for e in w.browser.model.entries() if e.kind == "lora" and e.status == "ok"
        }
        missing = []
        for name, use in wanted.items():
            if name in on_stack:
                continue
            if name in files:
                w.backend.add_lora(files[name], use.model_strength, use.clip_strength)
            else:
                missing.append(name)
        return missing
