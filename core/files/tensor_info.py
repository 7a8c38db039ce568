"""What a file says about one tensor, without its data."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """dtype (safetensors spelling, or a GGUF type name such as "Q4_K"), shape, and size."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)
