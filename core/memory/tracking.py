"""Measuring what a forward pass holds in activations: a tensor-allocation tracker.

:class:`ActivationTracker` is a ``TorchDispatchMode``: every aten op of the forward passes through
it, and each new storage an op returns is counted until it is freed (a weak reference on the
storage says when). The live total's maximum is the activation peak; it works on any device, so
the same number is measured on the CPU (where the allocator has no statistics) and on a GPU.

**Weights excluded.** A storage that existed before tracking began is not counted (the resident
weights, the inputs). A storage that an op makes only from such tensors, or from other weight-made
tensors (a streamed layer's cast copy, a LoRA patch applied at cast time), is "weight-made" and
not counted either; anything an op makes from at least one activation (or from nothing, like
``arange``) is an activation. Allocations inside one op that never leave it (a kernel's scratch
buffer) are not visible at this level; that is what "peak bytes of live activation tensors" means.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _tensors(values: Iterable[Any]) -> list[torch.Tensor]:
    flat, _ = tree_flatten(list(values))
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


class ActivationTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """``with ActivationTracker(roots=[x, context]) as tr: model(x, ...)``; then ``tr.peak_bytes``.

    ``roots`` are the inputs whose descendants count as activations (the latent, the text
    context...). Storages alive before entering that are not roots are weights. ``reset_peak()``
    starts a new peak (per step) while keeping what is live."""

    def __init__(self, roots: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._activation: set[int] = {_key(t) for t in roots}
        self._weight_made: set[int] = set()
        self._live: dict[int, int] = {}  # storage key -> bytes, counted activations only
        self.live_bytes = 0
        self.peak_bytes = 0
        self.ops = 0

    def reset_peak(self) -> None:
        self.peak_bytes = self.live_bytes

    def add_roots(self, roots: Iterable[torch.Tensor]) -> None:
        self._activation.update(_key(t) for t in roots)

    def _freed(self, key: int) -> None:
        self._weight_made.discard(key)
        self._activation.discard(key)
        nbytes = self._live.pop(key, 0)
        self.live_bytes -= nbytes

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        inputs = _tensors([args, kwargs])
        before = {_key(t) for t in inputs}
        out = func(*args, **kwargs)
        self.ops += 1
        from_activation = not inputs or any(k in self._activation for k in before)
        for t in _tensors([out]):
            key = _key(t)
            if key in before or key in self._live or key in self._weight_made:
                continue  # in place, a view, or already counted
            storage = t.untyped_storage()
            if from_activation:
                self._activation.add(key)
                nbytes = int(storage.nbytes())
                self._live[key] = nbytes
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            else:
                self._weight_made.add(key)
            weakref.finalize(storage, self._freed, key)
        return out
