"""Preprocessors: the hint a ControlNet takes, made from a picture (docs/generate.md, "Preprocessors").

Each is a :class:`Preprocessor` record in :data:`PREPROCESSORS` (one registry, duplicates refused):
its name (what a PNG's ``Module`` and the command line call it), what it makes, its settings with
their defaults and ranges, and a pure function ``(picture, settings) -> hint`` over (H, W, 3) uint8
pictures, or, for one that needs a model file (depth and normal: Depth Anything V2; openpose:
OpenPose's body network, with its hand and face networks for openpose_full ...; normalbae:
NormalBAE's ``scannet.pt``), the families of its files and the function that makes the hint with the
placed models (:mod:`core.preprocess.placed` loads, places and runs them); dwpose runs DWPose's two
ONNX files with ONNX Runtime (:mod:`core.preprocess.dwpose`, :mod:`core.preprocess.onnx_models`). The
edge work is OpenCV's (``opencv-python-headless``), imported when a hint is made.
"""

from core.preprocess.registry import (
    PREPROCESSORS,
    Preprocessor,
    Setting,
    UnknownPreprocessorError,
    find_preprocessor,
    preprocess,
    preprocessor_named,
)

__all__ = [
    "PREPROCESSORS",
    "Preprocessor",
    "Setting",
    "UnknownPreprocessorError",
    "find_preprocessor",
    "preprocess",
    "preprocessor_named",
]
