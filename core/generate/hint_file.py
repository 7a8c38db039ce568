"""A ControlNet hint made from a picture file by a preprocessor (:mod:`core.preprocess`), written as
a PNG (atomically) or handed to a generation."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from core.generate.pictures import read_picture
from core.generate.png import save_png
from core.preprocess import preprocess


def hint_from_file(name: str, picture: Path, settings: Mapping[str, float] | None = None) -> np.ndarray:
    """The (H, W, 3) uint8 hint preprocessor ``name`` makes of the picture file."""
    return preprocess(name, read_picture(picture, "picture to preprocess"), settings)


def write_hint(name: str, picture: Path, output: Path, settings: Mapping[str, float] | None = None) -> Path:
    """Make the hint and write it as a PNG at ``output``; returns ``output``."""
    return save_png(output, hint_from_file(name, picture, settings))
