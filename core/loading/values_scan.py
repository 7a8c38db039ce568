"""``loadout check --values``: read every tensor of a model file once and name those holding NaN
or infinite values (a damaged or badly converted file gives black pictures). One tensor in memory
at a time, read as ``convert`` reads it (safetensors by plain reads, pickles through the safe
loader, GGUF blocks dequantized to float32)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

from core.files.model_file import read_tensor_index
from core.loading.convert_file import _reader  # convert's reading, one tensor at a time
from core.quant.tensor import DeferredWeight


def nonfinite_tensors(
    path: str | os.PathLike[str],
    progress: Callable[[int, int], None] | None = None,
    check: Callable[[], None] | None = None,
) -> list[str]:
    """The names of ``path``'s tensors that hold a NaN or an infinity; ``progress(done, total)``
    after each tensor, ``check()`` between tensors (raises to stop)."""
    source = Path(path)
    index, get = _reader(source, read_tensor_index(source), torch.float32)
    names = list(index.tensors)
    bad = []
    for i, name in enumerate(names):
        if check is not None:
            check()
        t = get(name)
        if isinstance(t, DeferredWeight):
            t = t.materialize(torch.float32)
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            bad.append(name)
        if progress is not None:
            progress(i + 1, len(names))
    return bad
