"""A ControlNet hint made from a picture file by a preprocessor (:mod:`core.preprocess`), written as
a PNG (atomically) or handed to a generation. A preprocessor that needs a model file (depth) runs
it placed by a memory manager of its own on ``device`` (``vram_limit``: a card of that size
simulated there)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from core.generate.pictures import read_picture
from core.generate.png import save_png
from core.memory.devices import device_named
from core.preprocess import find_preprocessor, preprocess
from core.preprocess.placed import PreprocessorModels, model_files, model_run
from core.session.placement import Placement, PlacementConfig


def hint_from_file(
    name: str, picture: Path, settings: Mapping[str, float] | None = None, *, models: Iterable[Path] = (),
    device: str = "cpu", vram_limit: int | None = None,
) -> np.ndarray:  # fmt: skip
    """The (H, W, 3) uint8 hint preprocessor ``name`` makes of the picture file; ``models``: the
    model files a model preprocessor may use (the first of its family)."""
    record = find_preprocessor(name)
    rgb = read_picture(picture, "picture to preprocess")
    if record.model_family is None:
        return preprocess(name, rgb, settings)
    files = model_files([record], models, ())
    placement = Placement(
        device_named(device), PlacementConfig(simulate_bytes=vram_limit or 0), cpu_is_device=True
    )
    return preprocess(name, rgb, settings, model=model_run(placement, PreprocessorModels(), files))


def write_hint(
    name: str, picture: Path, output: Path, settings: Mapping[str, float] | None = None, *,
    models: Iterable[Path] = (), device: str = "cpu", vram_limit: int | None = None,
) -> Path:  # fmt: skip
    """Make the hint and write it as a PNG at ``output``; returns ``output``."""
    hint = hint_from_file(name, picture, settings, models=models, device=device, vram_limit=vram_limit)
    return save_png(output, hint)
