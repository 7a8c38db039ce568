"""What an architecture package gives for a preprocessor network (a model that makes a ControlNet
hint from a picture: depth, pose): the family id its files are detected as, how the network is
read from a file's shapes, built and filled, and the keys a file may carry unused. The package
exports it as ``PREPROCESSOR``; :data:`core.archs.catalog.PREPROCESSOR_NETS` collects them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

Shapes = Mapping[str, tuple[int, ...]]
#: module key -> (file key, part): part None takes the tensor whole, n the n-th of its fused rows
Sources = dict[str, tuple[str, int | None]]


@dataclass(frozen=True)
class PreprocessorNet:
    id: str  # the family id of its files (core.detect's record)
    title: str
    #: the network's config from the file's shapes in ``layout`` (KeyError/ValueError: incomplete)
    config: Callable[[Shapes, str], Any]
    #: the empty network of a config on a device ("meta": no memory)
    build: Callable[[Any, str], nn.Module]
    #: module key -> source, for every module key
    sources: Callable[[Any, str, list[str]], Sources]
    #: the file's shapes under the module's names (keys no source takes under their own)
    file_shapes: Callable[[Shapes, Sources, str], dict[str, tuple[int, ...]]]
    #: activation bytes of one run at an input of ``height`` x ``width`` pixels
    activation_bytes: Callable[[Any, int, int], int]
