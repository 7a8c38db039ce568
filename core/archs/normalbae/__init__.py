"""NormalBAE (a preprocessor network: picture -> surface normals), as lllyasviel's ``scannet.pt``
holds it: the EfficientNet-B5 encoder (:mod:`.encoder`), the decoder and its refinement heads
(:mod:`.net`) and the file's key layouts (:mod:`.keys`). The picture in and the map out are
:mod:`core.preprocess.normal_bae`'s."""

from __future__ import annotations

from typing import Any

from torch import nn

from core.archs.normalbae.keys import config_from_shapes, file_shapes_as_module, sources
from core.archs.normalbae.net import MULTIPLE, NormalBae, NormalBaeConfig
from core.archs.preprocessors import PreprocessorNet


def _build(cfg: Any, device: str) -> nn.Module:
    return NormalBae(cfg, device=device)


def activation_bytes(cfg: NormalBaeConfig, height: int, width: int) -> int:
    """A float32 run's peak of live tensors (measured: bench/preprocessor_memory.py): the last
    refinement at the full size holds its input (the 1/2 map and the prediction, each upscaled
    by 2) and two of its inner maps, beside the decoder's finer maps."""
    pixels = height * width
    return 4 * pixels * (cfg.ups[3] + 4 + 2 * cfg.refine + 64)


PREPROCESSOR = PreprocessorNet(
    "normalbae", "NormalBAE", config_from_shapes, _build, sources, file_shapes_as_module, activation_bytes,
)  # fmt: skip

__all__ = ["MULTIPLE", "PREPROCESSOR", "NormalBae", "NormalBaeConfig"]
