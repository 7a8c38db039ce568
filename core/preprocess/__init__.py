"""Preprocessors: the hint a ControlNet takes, made from a picture (docs/generate.md, "Preprocessors").

Each is a :class:`Preprocessor` record in :data:`PREPROCESSORS` (one registry, duplicates refused):
its name (what a PNG's ``Module`` and the command line call it), what it makes, its settings with
their defaults and ranges, and a pure function ``(picture, settings) -> hint`` over (H, W, 3) uint8
pictures. The image work is OpenCV's (``opencv-python-headless``), imported when a hint is made.
Model-based ones (depth, pose) are not here yet.
"""

from core.preprocess.registry import (
    PREPROCESSORS,
    Preprocessor,
    Setting,
    UnknownPreprocessorError,
    find_preprocessor,
    preprocess,
)

__all__ = [
    "PREPROCESSORS",
    "Preprocessor",
    "Setting",
    "UnknownPreprocessorError",
    "find_preprocessor",
    "preprocess",
]
