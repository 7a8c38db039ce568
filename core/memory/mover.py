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

import torch
from torch import Tensor, nn

from core.memory.managed import ManagedModel
from core.models.state import get_tensor, set_tensor
from core.ops.bulk_copy import SLOT_BYTES, copy_through_staging, stageable
from core.ops.staging import StagingBackend, StagingRing, build_ring, packed_bytes
from core.ops.stream_group import StreamedLayers
from core.ops.streaming import (
    patch_fn_from,
    stream_layers,
    streamable_layers,
    unstream_layers,
)
from core.patching.device_factors import DeviceFactors
from core.patching.patcher import ModelPatcher, Signature
from core.quant.tensor import DeferredWeight


@dataclass
class _Placed:
    module_ref: weakref.ref[nn.Module]  # weak: a model the app drops must be freed with its tensors
    originals: dict[str, Tensor] = field(default_factory=dict)  # key -> the CPU tensor it replaced
    applied: dict[str, Signature] = field(default_factory=dict)  # key -> the patches its copy holds
    loose: set[str] = field(default_factory=set)  # patched keys outside resident and streamed layers
    device: str = "cpu"
    streamed: StreamedLayers | None = None
    factors: DeviceFactors | None = None  # the stack's factors on the device (see device_factors)
    ring: StagingRing | None = None  # pinned staging buffers of its streamed layers
    pinning_note: str = ""  # why it streams from pageable memory (told once)


def _own_tensors(layer: nn.Module) -> list[tuple[str, Tensor]]:
    found: list[tuple[str, Tensor]] = [(n, t) for n, t in layer._parameters.items() if t is not None]
    found += [(n, t) for n, t in layer._buffers.items() if t is not None]
    return found


def _release_cached(device: str) -> None:
    """Give the blocks freed by an unload back to the driver (CUDA's caching allocator keeps them
    otherwise: taken from the desktop, and shown as used in the memory plot)."""
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _layer_tensors(module: nn.Module, name: str) -> list[Tensor | None]:
    layer = module.get_submodule(name) if name else module
    weight = getattr(layer, "weight", None)
    plain = weight.plain() if isinstance(weight, DeferredWeight) else weight
    return [plain, getattr(layer, "bias", None)]


def _owner(key: str) -> str:
    return key.rpartition(".")[0]


class TorchMover:
    """Implements ``core.memory.manager.Mover``. Models are registered as a ``ModelPatcher`` (its
    stack is applied on placement and at cast time) or as a bare ``nn.Module``."""

    def __init__(
        self,
        *,
        interrupt: Callable[[], None] | None = None,
        pin: bool = False,
        pinned_cap: int | None = None,
        staging: StagingBackend | None = None,
        on_pinning: Callable[[str, str], None] | None = None,
    ) -> None:
        """``pin``: streamed layers go through a few reused pinned buffers (``core.ops.staging``)
        within ``pinned_cap`` bytes (None: no cap) from ``staging`` (the CUDA backend by default);
        when they cannot be had, ``on_pinning(model, reason)`` is told and copies are pageable."""
        self.interrupt = interrupt
        self.pin = pin
        self.pinned_cap = pinned_cap
        self.staging_backend = staging
        self.on_pinning = on_pinning
        self._placed: dict[int, _Placed] = {}
        self._load_buffers: tuple[StagingRing | None, str] | None = None  # see _load_ring
        # module id -> its patcher, held weakly: the app owns its stacks
        self._patchers: weakref.WeakValueDictionary[int, ModelPatcher] = weakref.WeakValueDictionary()

    def use_patcher(self, patcher: ModelPatcher) -> None:
        """Apply ``patcher``'s stack when its module is placed. The manager tracks the module (the
        patcher's clones share it), so the mover is told which stack goes with it. A different
        stack for a module already placed takes effect at its next placement."""
        self._patchers[id(patcher.model)] = patcher

    # -- bookkeeping ------------------------------------------------------------------------------
    def _module_of(self, target: object) -> nn.Module:
        module = target.model if isinstance(target, ModelPatcher) else target
        if not isinstance(module, nn.Module):
            raise TypeError(f"cannot place a {type(target).__name__}")
        return module

    def _resolve(self, entry: ManagedModel) -> tuple[_Placed, nn.Module, ModelPatcher | None]:
        target = entry.model()
        if target is None:
            raise RuntimeError(f"{entry.name} was released by the app")
        module = self._module_of(target)
        placed = self._placed.get(id(module))
        if placed is None or placed.module_ref() is not module:
            placed = _Placed(weakref.ref(module))
            self._placed[id(module)] = placed
            weakref.finalize(module, self._placed.pop, id(module), None)
        patcher = target if isinstance(target, ModelPatcher) else self._patchers.get(id(module))
        return placed, module, patcher

    def _find(self, entry: ManagedModel) -> tuple[_Placed, nn.Module, ModelPatcher | None] | None:
        target = entry.model()
        if target is None or id(self._module_of(target)) not in self._placed:
            return None
        return self._resolve(entry)

    def stats(self, entry: ManagedModel) -> StreamedLayers | None:
        found = self._find(entry)
        return found[0].streamed if found is not None else None

    # -- placing ----------------------------------------------------------------------------------
    def load(self, entry: ManagedModel, module_names: Sequence[str], device: str) -> int:
        """Place ``module_names`` on ``device`` and stream every other op layer (no names: just
        set streaming up again for what is not resident)."""
        placed, module, patcher = self._resolve(entry)
        resident = set(entry.loaded_modules) | set(module_names)
        self._unstream(placed, module)
        if placed.factors is None or placed.factors.device != torch.device(device):
            placed.factors = DeviceFactors(device)
        if patcher is not None:
            placed.factors.patcher_for(patcher)  # every factor goes now, none at a forward
        placed.device = device
        moved = 0
        todo: list[tuple[str, Tensor]] = []
        for name in module_names:
            layer = module.get_submodule(name) if name else module
            for leaf, tensor in _own_tensors(layer):
                key = f"{name}.{leaf}" if name else leaf
                original = placed.originals.setdefault(key, tensor)
                placed.loose.discard(key)
                todo.append((key, original))
                moved += original.numel() * original.element_size()
        copies = self._bulk_copies([t for _, t in todo], device)
        for (key, original), copy in zip(todo, copies, strict=True):
            self._place(placed, module, patcher, key, original, copy)
        streamable = [n for n, _ in streamable_layers(module)]
        rest = [n for n in streamable if n not in resident]
        self._place_small(placed, module, patcher, entry, resident | set(streamable))
        patch_fn, touches = None, None
        if patcher is not None:
            factors, stack = placed.factors, patcher

            def weights(key: str, base: Tensor) -> tuple[Tensor, bool]:
                return factors.patcher_for(stack).patched_weight(key, base, cache=base.device.type == "cpu")

            patch_fn = patch_fn_from(weights)
            touches = lambda key: bool(stack.signature(key))  # noqa: E731 - the current stack
        placed.streamed = stream_layers(
            module,
            rest,
            device,
            patch_fn=patch_fn,
            touches=touches,
            interrupt=self.interrupt,
            staging=self._ring(placed, module, rest, device, entry.name),
        )
        self._place_loose(placed, module, patcher)
        return moved

    def _bulk_copies(self, originals: Sequence[Tensor], device: str) -> list[Tensor | None]:
        """Device copies of the host tensors among ``originals`` made through two pinned buffers
        (``core.ops.bulk_copy``: a CUDA load from a file's pages runs at the pinned bus speed, not
        the pageable one); None for the others, and for all when pinning is off, the device is not
        a CUDA one (a test's stand-in backend on ``meta`` counts as one) or the buffers cannot be
        had -- those are copied one by one as before."""
        out: list[Tensor | None] = [None] * len(originals)
        kind = torch.device(device).type
        if not self.pin or not (kind == "cuda" or (kind == "meta" and self.staging_backend is not None)):
            return out
        chosen = [i for i, t in enumerate(originals) if stageable(t)]
        if sum(originals[i].nbytes for i in chosen) < 2 * SLOT_BYTES:
            return out  # a few small tensors: the buffers would cost more than they save
        ring = self._load_ring()
        if ring is None:
            return out
        copies = copy_through_staging([originals[i] for i in chosen], torch.device(device), ring)
        for i, copy in zip(chosen, copies, strict=True):
            out[i] = copy
        return out

    def _load_ring(self) -> StagingRing | None:
        """The two load buffers, made once per mover (None: pinning failed or is capped)."""
        if self._load_buffers is None:
            cap = self.pinned_cap if self.pinned_cap is not None else 1 << 62
            self._load_buffers = build_ring(SLOT_BYTES, cap, backend=self.staging_backend)
        return self._load_buffers[0]

    def _place(
        self,
        placed: _Placed,
        module: nn.Module,
        patcher: ModelPatcher | None,
        key: str,
        original: Tensor,
        copy: Tensor | None = None,
    ) -> None:
        if copy is None:
            copy = original.to(placed.device, non_blocking=True)
        signature: Signature = ()
        if patcher is not None:
            signature = patcher.signature(key)
            if signature:
                on_device = patcher if placed.factors is None else placed.factors.patcher_for(patcher)
                copy = on_device.patched_weight(key, copy, cache=copy.device.type == "cpu")[0]
        set_tensor(module, key, copy)
        placed.applied[key] = signature

    def _ring(
        self, placed: _Placed, module: nn.Module, names: Sequence[str], device: str, model: str
    ) -> StagingRing | None:
        """The staging buffers for ``names`` streamed to ``device`` (kept while big enough), or
        None: pinning off, a host device, nothing to stream, or pinning failed (said once)."""
        kind = torch.device(device).type
        if not self.pin or kind == "cpu" or (kind == "meta" and self.staging_backend is None):
            return None  # host memory is the device (or a test's stand-in without a backend)
        largest = max((packed_bytes(_layer_tensors(module, n)) for n in names), default=0)
        if placed.ring is not None and placed.ring.slot_bytes >= largest:
            return placed.ring
        cap = self.pinned_cap if self.pinned_cap is not None else 1 << 62
        placed.ring, note = build_ring(largest, cap, backend=self.staging_backend)
        if note and note != placed.pinning_note and self.on_pinning is not None and largest:
            self.on_pinning(model, note)
        placed.pinning_note = note
        return placed.ring

    def _place_small(
        self,
        placed: _Placed,
        module: nn.Module,
        patcher: ModelPatcher | None,
        entry: ManagedModel,
        handled: set[str],
    ) -> None:
        """Tensors of modules that are neither resident nor op layers (a Flux block's RMSNorm
        scale): they cannot stream, so left on the host every forward would copy them (and wait
        for the card). They are a few KiB: they go to the device with the first partial load."""
        for name, _ in entry.module_sizes:
            if name in handled:
                continue
            layer = module.get_submodule(name) if name else module
            for leaf, tensor in _own_tensors(layer):
                key = f"{name}.{leaf}" if name else leaf
                if key not in placed.originals:
                    placed.originals[key] = tensor
                    self._place(placed, module, patcher, key, tensor)

    def _place_loose(self, placed: _Placed, module: nn.Module, patcher: ModelPatcher | None) -> int:
        """Patched weights outside op layers (a norm's scale, say) are neither resident nor
        streamed in a partial load; they are tiny, so they are placed patched. A loose weight no
        longer patched gets its original back."""
        if patcher is None:
            return 0
        streamed = set(placed.streamed.names) if placed.streamed is not None else set()
        changed = 0
        for key in sorted(patcher.patched_keys()):
            if key in placed.originals or _owner(key) in streamed:
                continue
            placed.originals[key] = get_tensor(module, key)
            placed.loose.add(key)
            self._place(placed, module, patcher, key, placed.originals[key])
            changed += 1
        for key in [k for k in placed.loose if not patcher.signature(k)]:
            set_tensor(module, key, placed.originals.pop(key))
            placed.applied.pop(key, None)
            placed.loose.discard(key)
            changed += 1
        return changed

    def refresh(self, entry: ManagedModel) -> int:
        """Bring a changed LoRA stack onto the placed weights: every resident weight whose patches
        changed since it was placed is recomputed from its original (on the device). Returns how
        many were. Streamed layers apply the current stack at each forward already."""
        found = self._find(entry)
        if found is None:
            return 0
        placed, module, patcher = found
        changed = 0
        for key, original in list(placed.originals.items()):
            wanted = patcher.signature(key) if patcher is not None else ()
            if key in placed.loose and not wanted:
                continue  # no longer patched: _place_loose puts its original back
            if placed.applied.get(key, ()) != wanted:
                self._place(placed, module, patcher, key, original)
                changed += 1
        if placed.streamed is not None:  # placed (streaming set up, possibly with nothing to stream)
            changed += self._place_loose(placed, module, patcher)
        return changed

    def factor_bytes(self, target: object) -> int:
        """Bytes of the LoRA factors placing ``target`` copies to the device (its active stack's
        adapters, each once): the caller adds them to the room it asks the manager for."""
        module = self._module_of(target)
        patcher = target if isinstance(target, ModelPatcher) else self._patchers.get(id(module))
        if patcher is None:
            return 0
        adapters = {
            id(p.adapter): p.adapter
            for s in patcher.sets
            if s.active
            for ps in s.patches.values()
            for p in ps
        }
        return sum(a.factor_bytes() for a in adapters.values())

    def drop_prefetched(self) -> int:
        """Free every copy started ahead (the next forward's first layer, fetched at the end of
        the last one): called when a run ends or is interrupted, so nothing unplanned stays on
        the device between runs. Returns how many copies were dropped."""
        dropped = 0
        for placed in self._placed.values():
            if placed.streamed is not None:
                dropped += placed.streamed.drop_prefetched()
        return dropped

    # -- unplacing --------------------------------------------------------------------------------
    def stop_streaming(self, entry: ManagedModel) -> None:
        """The model left the device entirely: streaming stops and every weight still placed (the
        loose ones) gets its original back."""
        found = self._find(entry)
        if found is None:
            return
        placed, module, _ = found
        self._unstream(placed, module)
        self._restore_all(placed, module)
        placed.ring = None
        _release_cached(placed.device)

    def unload(self, entry: ManagedModel, module_names: Sequence[str]) -> int:
        found = self._find(entry)
        if found is None:
            return 0
        placed, module, _ = found
        freed = 0
        for name in module_names:
            prefix = f"{name}." if name else ""
            for key in [k for k in placed.originals if k.startswith(prefix) and "." not in k[len(prefix) :]]:
                if key in placed.loose:
                    continue
                original = placed.originals.pop(key)
                placed.applied.pop(key, None)
                set_tensor(module, key, original)
                freed += original.numel() * original.element_size()
        _release_cached(placed.device)
        return freed

    def _unstream(self, placed: _Placed, module: nn.Module) -> None:
        if placed.streamed is not None:
            unstream_layers(module, placed.streamed.names)
            placed.streamed = None

    def _restore_all(self, placed: _Placed, module: nn.Module) -> None:
        for key, original in placed.originals.items():
            set_tensor(module, key, original)
        if placed.factors is not None:
            placed.factors.clear()
        placed.originals.clear()
        placed.applied.clear()
        placed.loose.clear()

    def release(self, target: object) -> None:
        """Put every original back and stop streaming (the model leaves the manager)."""
        module = self._module_of(target)
        self._patchers.pop(id(module), None)
        placed = self._placed.pop(id(module), None)
        if placed is None or placed.module_ref() is not module:
            return
        self._unstream(placed, module)
        self._restore_all(placed, module)
