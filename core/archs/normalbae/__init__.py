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
    """A float32 run's peak of live tensors, at the last refinement (full size): its input (the
    1/2 map and the prediction, each upscaled by 2), two of its inner maps, the decoder's 1/2,
    1/4 and 1/8 maps, and the predictions being normalized (18 channels' worth). Measured by
    bench/preprocessor_memory.py: 461.2 floats a pixel at every size, this says 462."""
    ups = cfg.ups
    per_pixel = ups[3] + 4 + 2 * cfg.refine + ups[3] // 4 + ups[2] // 16 + ups[1] // 64 + 18
    return 4 * height * width * per_pixel


PREPROCESSOR = PreprocessorNet(
    "normalbae", "NormalBAE", config_from_shapes, _build, sources, file_shapes_as_module, activation_bytes,
)  # fmt: skip

__all__ = ["MULTIPLE", "PREPROCESSOR", "NormalBae", "NormalBaeConfig"]
