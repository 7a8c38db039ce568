"""Preview maps of the model preprocessors (depth, normal, the openpose ones, normalbae, dwpose) for
the window's ControlNet rows: made on the backend's worker thread (the session's placement places
the models, as a generation would: the same cached models then serve the generation), from the
picture shrunk to the preview's size, each model the first of its family in the library
(openpose_full: the body, hand and face files; dwpose: its two ONNX files, found by their graphs
under the library's folders). The map (or the reason there is none) comes back through
:attr:`HintMaps.made` on the window's thread."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtCore import QObject, Signal

from app.backend.backend import Backend
from app.backend.worker import Reporter
from core.errors import LoadoutError
from core.preprocess import find_preprocessor, preprocess
from core.preprocess.placed import library_models, model_files, model_run


def shrunk(picture: Path, side: int) -> np.ndarray:
    """``picture`` as RGB, shrunk to fit ``side`` (H, W, 3 uint8)."""
    with Image.open(picture) as im:
        small = im.convert("RGB")
        small.thumbnail((side, side), Image.Resampling.LANCZOS)
        return np.asarray(small)


class HintMaps(QObject):
    made = Signal(object, object)  # (the asker's key, the map (H, W, 3 uint8) or the reason as text)

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend

    def request(self, key: object, picture: Path, name: str, side: int) -> None:
        """Make preprocessor ``name``'s map of ``picture`` (shrunk to ``side``) on the worker."""
        session, state = self.backend.session, self.backend.generator.state.workflows

        def work(r: Reporter) -> None:
            record = find_preprocessor(name)
            try:
                files = model_files([record], (), library_models(session.library.index, [record]))
                run = model_run(session.placement, state.preprocessors, files, r.check)
                made: object = preprocess(name, shrunk(picture, side), model=run)
            except (LoadoutError, OSError) as exc:
                made = str(exc)
            self.made.emit(key, made)

        self.backend.submit("preprocess", work)
