"""The mover: carries out the memory manager's plans on real torch modules.

Resident layers get a device copy of their weights with the LoRA stack applied on the way
(patches computed on the device). Every other op layer streams: its weights are copied per
forward with the patches applied at cast time (``core.ops.streaming``). Unloading puts the
original CPU tensors back — the memory-mapped file pages, never a second copy — so unloading
never doubles RAM, and patched weights are simply dropped.

The stack is applied here, so the CPU module must hold the *unpatched* weights while it is placed
(never ``ModelPatcher.apply()`` a placed model). A stack changed while placed is brought onto the
device by :meth:`TorchMover.refresh` (resident weights whose patches changed are recomputed from
the originals); streamed layers read the stack at every forward and need nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torch import Tensor, nn

from core.memory.manager import ManagedModel
from core.models.state import set_tensor
from core.ops.streaming import (
    StreamedLayers,
    patch_fn_from,
    stream_layers,
    streamable_layers,
    unstream_layers,
)
from core.patching.patcher import ModelPatcher, Signature


@dataclass
class _Placed:
    module: nn.Module
    patcher: ModelPatcher | None
    originals: dict[str, Tensor] = field(default_factory=dict)  # key -> the CPU tensor it replaced
    applied: dict[str, Signature] = field(default_factory=dict)  # key -> the patches its copy holds
    device: str = "cpu"
    streamed: StreamedLayers | None = None


def _own_tensors(layer: nn.Module) -> list[tuple[str, Tensor]]:
    found: list[tuple[str, Tensor]] = [(n, t) for n, t in layer._parameters.items() if t is not None]
    found += [(n, t) for n, t in layer._buffers.items() if t is not None]
    return found


class TorchMover:
    """Implements ``core.memory.manager.Mover``. Models are registered as a ``ModelPatcher`` (its
    stack is applied on placement and at cast time) or as a bare ``nn.Module``."""

    def __init__(self, *, interrupt: Callable[[], None] | None = None, pin: bool = False) -> None:
        self.interrupt = interrupt
        self.pin = pin
        self._placed: dict[int, _Placed] = {}
        # module id -> its patcher, held weakly: the app owns its stacks
        self._patchers: weakref.WeakValueDictionary[int, ModelPatcher] = weakref.WeakValueDictionary()

    def use_patcher(self, patcher: ModelPatcher) -> None:
        """Apply ``patcher``'s stack when its module is placed. The manager tracks the module (the
        patcher's clones share it), so the mover is told which stack goes with it. A different
        stack for a module already placed takes effect at its next placement."""
        self._patchers[id(patcher.model)] = patcher

    def _resolve(self, entry: ManagedModel) -> _Placed:
        target = entry.model()
        if target is None:
            raise RuntimeError(f"{entry.name} was released by the app")
        placed = self._placed.get(id(target))
        if placed is None:
            module = target.model if isinstance(target, ModelPatcher) else target
            if not isinstance(module, nn.Module):
                raise TypeError(f"cannot place a {type(target).__name__}")
            placed = _Placed(module, None)
            self._placed[id(target)] = placed
        placed.patcher = target if isinstance(target, ModelPatcher) else self._patchers.get(id(placed.module))
        return placed

    def stats(self, entry: ManagedModel) -> StreamedLayers | None:
        target = entry.model()
        placed = self._placed.get(id(target)) if target is not None else None
        return placed.streamed if placed is not None else None

    def load(self, entry: ManagedModel, module_names: Sequence[str], device: str) -> int:
        placed = self._resolve(entry)
        module, patcher = placed.module, placed.patcher
        resident = set(entry.loaded_modules) | set(module_names)
        self._unstream(placed)
        placed.device = device
        moved = 0
        for name in module_names:
            layer = module.get_submodule(name) if name else module
            for leaf, tensor in _own_tensors(layer):
                key = f"{name}.{leaf}" if name else leaf
                original = placed.originals.setdefault(key, tensor)
                self._place(placed, key, original)
                moved += original.numel() * original.element_size()
        rest = [n for n, _ in streamable_layers(module) if n not in resident]
        patch_fn = patch_fn_from(patcher.patched_weight) if patcher is not None else None
        placed.streamed = stream_layers(
            module, rest, device, patch_fn=patch_fn, interrupt=self.interrupt, pin=self.pin
        )
        return moved

    def _place(self, placed: _Placed, key: str, original: Tensor) -> None:
        copy = original.to(placed.device, non_blocking=True)
        signature: Signature = ()
        if placed.patcher is not None:
            signature = placed.patcher.signature(key)
            if signature:
                copy = placed.patcher.patched_weight(key, copy)[0]
        set_tensor(placed.module, key, copy)
        placed.applied[key] = signature

    def refresh(self, entry: ManagedModel) -> int:
        """Bring a changed LoRA stack onto the placed weights: every resident weight whose patches
        changed since it was placed is recomputed from its original (on the device). Returns how
        many were. Streamed layers apply the current stack at each forward already."""
        target = entry.model()
        placed = self._placed.get(id(target)) if target is not None else None
        if placed is None:
            return 0
        placed.patcher = self._patchers.get(id(placed.module), placed.patcher)
        changed = 0
        for key, original in placed.originals.items():
            wanted = placed.patcher.signature(key) if placed.patcher is not None else ()
            if placed.applied.get(key, ()) != wanted:
                self._place(placed, key, original)
                changed += 1
        return changed

    def stop_streaming(self, entry: ManagedModel) -> None:
        """The model left the device entirely: its layers compute from their own weights again."""
        target = entry.model()
        placed = self._placed.get(id(target)) if target is not None else None
        if placed is not None:
            self._unstream(placed)

    def unload(self, entry: ManagedModel, module_names: Sequence[str]) -> int:
        target = entry.model()
        placed = self._placed.get(id(target)) if target is not None else None
        if placed is None:
            return 0
        freed = 0
        for name in module_names:
            prefix = f"{name}." if name else ""
            for key in [k for k in placed.originals if k.startswith(prefix) and "." not in k[len(prefix) :]]:
                original = placed.originals.pop(key)
                placed.applied.pop(key, None)
                set_tensor(placed.module, key, original)
                freed += original.numel() * original.element_size()
        return freed

    def _unstream(self, placed: _Placed) -> None:
        if placed.streamed is not None:
            unstream_layers(placed.module, placed.streamed.names)
            placed.streamed = None

    def release(self, target: object) -> None:
        """Put every original back and stop streaming (the model leaves the manager)."""
        self._patchers.pop(id(getattr(target, "model", target)), None)
        placed = self._placed.pop(id(target), None)
        if placed is None:
            return
        self._unstream(placed)
        for key, original in placed.originals.items():
            set_tensor(placed.module, key, original)
        placed.originals.clear()
        placed.applied.clear()
