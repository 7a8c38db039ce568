"""How a network is built from a file: the :class:`Architecture` record every package (and each
text encoder) hands the loader.

Conversions are functions over a *mapping of tensors*: the same code converts real memory-mapped
tensors when loading and meta tensors (shapes only, no data) for ``loadout check``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from core.detect.types import Role

Tensors = Mapping[str, torch.Tensor]
Shapes = dict[str, tuple[int, ...]]
#: file layout -> module layout, given the family (conversions may need a preset config)
Converter = Callable[[Tensors, str], Tensors]


@dataclass(frozen=True)
class Architecture:
    name: str
    role: Role
    families: tuple[str, ...]
    configure: Callable[[Shapes, str], Any]  # module-layout shapes, family -> config
    build: Callable[[Any, torch.device | str | None, torch.dtype | None], nn.Module]
    to_module: Mapping[str, Converter] = field(default_factory=dict)  # by file layout
    to_file: Mapping[str, Converter] = field(default_factory=dict)  # module layout -> file layout
    normalize: Converter | None = None  # after the layout conversion (aliases, tied weights)
    harmless: frozenset[str] = frozenset()  # extra file keys known to be safe to ignore
    optional: frozenset[str] = frozenset()  # module keys a file may lack

    #: says what is inconsistent in a config read from shapes ('' when nothing): damage that
    #: shapes alone would silently turn into a different network
    consistency: Callable[[Any], str] | None = None

    def differs_from_family(self, config: Any, family: str) -> str:
        return "" if self.consistency is None else self.consistency(config)

    def convert_in(self, tensors: Tensors, layout: str, family: str) -> Tensors:
        conv = self.to_module.get(layout)
        out = tensors if conv is None else conv(tensors, family)
        return out if self.normalize is None else self.normalize(out, family)

    def convert_out(self, tensors: Tensors, layout: str, family: str) -> Tensors:
        conv = self.to_file.get(layout)
        return tensors if conv is None else conv(tensors, family)
