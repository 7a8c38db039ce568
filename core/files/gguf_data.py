"""GGUF tensor data, memory-mapped through the reference reader (``gguf.GGUFReader``).

The header is first read and validated by :func:`core.files.gguf.read_gguf_header` (clear errors for
damaged files: wrong magic, truncation, unknown tensor types, tensors outside the file); then the
file is mapped copy-on-write by ``gguf.GGUFReader``, whose numpy views become torch tensors without
a copy. Plain types (F32/F16/BF16...) come back as ordinary tensors of their logical shape;
block-quantized ones as :class:`core.quant.tensor.QuantizedWeight` (the bytes, the type and the
logical shape, ComfyUI-GGUF's ``comfy.gguf.orig_shape`` applied), to be dequantized per layer at
forward.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from core.errors import FileFormatError
from core.files.gguf import GGUFHeader, read_gguf_header
from core.quant.gguf_types import DEQUANTIZABLE, PLAIN_DTYPES
from core.quant.tensor import QuantizedWeight


class GGUFTensors:
    """Tensors of one GGUF file by name, zero-copy views of its mapping."""

    def __init__(self, path: str | os.PathLike[str], header: GGUFHeader | None = None) -> None:
        import gguf  # the reference reader; imported when a GGUF file is actually loaded

        self.path = Path(path)
        self.header = header or read_gguf_header(self.path)
        try:
            reader = gguf.GGUFReader(self.path, "c")
        except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
            raise FileFormatError(
                f"{self.path.name} is not a valid GGUF file",
                why=f"the GGUF reader refused it: {exc}",
                fix="Download the file again",
                code="invalid_file",
            ) from exc
        self._data = {t.name: t.data for t in reader.tensors}

    def __contains__(self, name: str) -> bool:
        return name in self._data

    def keys(self) -> list[str]:
        return list(self._data)

    def tensor(self, name: str) -> Tensor:
        info = self.header.tensors[name]
        data = self._data[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # views of a copy-on-write map are writable: no copy
            array = np.asarray(data)
        if info.dtype in PLAIN_DTYPES:
            flat = torch.from_numpy(array.reshape(-1))
            if info.dtype == "BF16":  # numpy has no bfloat16: the reader hands out the raw halves
                flat = flat.view(torch.bfloat16)
            return flat.view(PLAIN_DTYPES[info.dtype]).reshape(info.shape)
        if info.dtype not in DEQUANTIZABLE:
            raise FileFormatError(
                f"{self.path.name}: tensor {name} is {info.dtype}, which Loadout cannot dequantize",
                why=f"supported quantized types are {', '.join(sorted(DEQUANTIZABLE))}",
                fix="Use a file quantized to one of those (Q8_0, Q6_K, Q5_K, Q4_K... are common)",
                code="unsupported_format",
            )
        raw = torch.from_numpy(array.reshape(-1).view(np.uint8))
        return QuantizedWeight(raw, info.dtype, info.shape)
