"""What a file says about one tensor, without its data."""

from __future__ import annotations

import math
from typing import NamedTuple


class TensorInfo(NamedTuple):
    """dtype (safetensors spelling, or a GGUF type name such as "Q4_K"), shape, and size.

    A named tuple rather than a dataclass: headers hold thousands of entries and building them is
    on the path of every file the library indexes.
    """

    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)
