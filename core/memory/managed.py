"""The memory manager's record of one model: held weakly, its weight groups' sizes, what of it is on
the device. Only :class:`~core.memory.manager.MemoryManager` changes a record."""

from __future__ import annotations

import itertools
import weakref

import torch
from torch import nn

from core.memory.events import gib
from core.memory.planning import ModelState


def module_sizes(module: nn.Module) -> tuple[tuple[str, int], ...]:
    """Leaf weight groups: every submodule's own parameters and buffers, in bytes ("" = the root)."""
    sizes = []
    for name, sub in module.named_modules():
        tensors = itertools.chain(sub.parameters(recurse=False), sub.buffers(recurse=False))
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        if nbytes:
            sizes.append((name, nbytes))
    return tuple(sizes)


def looked_up_tables(module: nn.Module) -> frozenset[str]:
    """Embedding tables of ``module``: streamed, a forward sends only the rows it looks up
    (:meth:`core.ops.streaming.LayerStream.look_up`), so none of their size is in flight."""
    return frozenset(name for name, sub in module.named_modules() if isinstance(sub, nn.Embedding))


def main_dtype(module: nn.Module) -> str | None:
    by_dtype: dict[torch.dtype, int] = {}
    for t in module.parameters():
        by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.numel() * t.element_size()
    return str(max(by_dtype, key=by_dtype.__getitem__)).removeprefix("torch.") if by_dtype else None


class ManagedModel:
    """The manager's record of one model. It holds the model weakly; ``model()`` is None once the
    app dropped it. Only the manager changes ``loaded_modules``/``streaming``/``last_used``."""

    def __init__(
        self,
        name: str,
        ref: weakref.ref[object],
        sizes: tuple[tuple[str, int], ...],
        dtype: str | None,
        looked_up: frozenset[str] = frozenset(),
        inflight: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.name = name
        self.inflight = inflight  # streamed layers' bytes in flight beyond stored (transients.py)
        self.looked_up = looked_up  # embedding tables: streamed, only the rows looked up travel
        self.ref = ref
        self.module_sizes = sizes
        self.total_bytes = sum(s for _, s in sizes)
        self.dtype = dtype
        self.loaded_modules: frozenset[str] = frozenset()  # replaced, never mutated: readers see snapshots
        self.streaming = False
        self.last_used = 0
        self.last_reason = ""  # the reason of the last event told about this model
        self._size = dict(sizes) or {"": 0}

    def model(self) -> object | None:
        return self.ref()

    @property
    def loaded_bytes(self) -> int:
        return sum(self._size.get(n, 0) for n in self.loaded_modules)

    def state(self, pinned: bool = False) -> ModelState:
        return ModelState(
            self.name,
            self.total_bytes,
            self.loaded_bytes,
            self.last_used,
            pinned,
            self.module_sizes,
            self.loaded_modules,
            self.looked_up,
            self.inflight,
        )

    def __repr__(self) -> str:
        return (
            f"ManagedModel({self.name!r}, {gib(self.loaded_bytes)} of {gib(self.total_bytes)} on the device)"
        )
