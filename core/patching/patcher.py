"""ModelPatcher: LoRA stacks on a model, recorded cheaply and applied incrementally.

A patcher wraps a module and records *patch sets* (one per LoRA or other adapter file): for each
weight key the adapters that patch it, with one strength per set. Recording touches no weight.
``apply()`` makes the module's weights match the recorded stack and recomputes **only** the keys
whose stack changed since the last apply — a strength change, enabling or disabling one LoRA, or
adding one recomputes the keys that LoRA touches and nothing else.

Originals are never modified. A patched weight is a new tensor; the original (often a zero-copy
view of the memory-mapped file) is kept as the backup, so restoring is bit-exact and free.

Clones (``clone()``) share the module and its applied state, and copy only the patch lists, so a
clone with an unchanged stack is recognised (``identity()``) and applying it costs nothing.

Stacks of plain LoRA/LoCon (the common case) bake fused from their factors, block by block in a
cache-sized buffer (``adapters.fused``): no full-size float32 copy or delta is ever held. For
other additive adapters (LoHa, LoKr without DoRA, full diffs), whose change costs more to compute
than to add, the per-key change at strength 1 is cached in float32 within a byte budget;
re-applying after a strength change is then one pass over the weight instead of re-running the
adapter math. Either way the result is bit-identical to ``apply_patches`` from scratch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import torch
from torch import Tensor, nn

from core.errors import LoadoutError
from core.models.state import get_tensor, set_tensor
from core.patching.adapters.base import Adapter
from core.patching.adapters.fused import fusable
from core.patching.adapters.lora import LoRAAdapter
from core.patching.adapters.slices import Patch, apply_patches
from core.patching.patch_set import AppliedState, ApplyReport, KeyPatch, PatchSet, Signature
from core.patching.side import LoraSidePath, clear_side_outputs, has_side_path, set_side_outputs
from core.quant.fp8_weight import FP8_DTYPES, fp8_with_patch
from core.quant.tensor import DeferredWeight, logical_shape

__all__ = ["ApplyReport", "KeyPatch", "ModelPatcher", "PatchSet", "Signature"]


class ModelPatcher:
    def __init__(
        self,
        model: nn.Module,
        *,
        intermediate_dtype: torch.dtype = torch.float32,
        delta_cache_bytes: int = 2 << 30,
        _state: AppliedState | None = None,
    ) -> None:
        self.model = model
        self.intermediate_dtype = intermediate_dtype
        self.delta_cache_bytes = delta_cache_bytes
        self._sets: dict[str, PatchSet] = {}
        self._objects: dict[str, object] = {}
        self._state = _state if _state is not None else AppliedState()

    # -- recording (no weight is touched) ---------------------------------------------------------
    def clone(self) -> ModelPatcher:
        """A patcher on the same module and applied state, with its own copy of the patch list."""
        twin = ModelPatcher(
            self.model,
            intermediate_dtype=self.intermediate_dtype,
            delta_cache_bytes=self.delta_cache_bytes,
            _state=self._state,
        )
        twin._sets = dict(self._sets)
        twin._objects = dict(self._objects)
        return twin

    def with_adapters(self, swap: Callable[[Adapter], Adapter]) -> ModelPatcher:
        """A clone whose active sets hold ``swap(adapter)`` in place of each adapter (the same
        keys, strengths and order): the mover's twin with the factors on the device."""
        twin = self.clone()
        twin._sets = {
            k: replace(s, patches={key: tuple(replace(p, adapter=swap(p.adapter)) for p in ps)
                                   for key, ps in s.patches.items()}) if s.active else s
            for k, s in self._sets.items()
        }  # fmt: skip
        return twin

    def add_object_patch(self, path: str, value: object) -> None:
        """Replace an attribute or submodule (dotted path, e.g. ``"middle_block.1"``) while
        patched; ``apply()`` sets it, ``unpatch()`` puts the original back."""
        self._owner_of(path)  # raises AttributeError now rather than at apply()
        self._objects[path] = value

    def remove_object_patch(self, path: str) -> None:
        del self._objects[path]

    def _owner_of(self, path: str) -> tuple[object, str]:
        owner_name, _, leaf = path.rpartition(".")
        owner: object = self.model.get_submodule(owner_name) if owner_name else self.model
        if not hasattr(owner, leaf):
            raise AttributeError(f"the model has no attribute {path!r} to patch")
        return owner, leaf

    def _apply_objects(self) -> None:
        state = self._state
        for path in [p for p in state.objects_applied if p not in self._objects]:
            owner, leaf = self._owner_of(path)
            setattr(owner, leaf, state.object_backups.pop(path))
            del state.objects_applied[path]
        for path, value in self._objects.items():
            if state.objects_applied.get(path) is value:
                continue
            owner, leaf = self._owner_of(path)
            if path not in state.object_backups:
                state.object_backups[path] = getattr(owner, leaf)
            setattr(owner, leaf, value)
            state.objects_applied[path] = value

    def add_patches(
        self,
        set_id: str,
        patches: Mapping[str, Sequence[KeyPatch]],
        strength: float = 1.0,
        scales: Mapping[str, float] | None = None,
    ) -> list[str]:
        """Record a patch set on top of the stack (``scales``: per-key multipliers of its strength,
        the LoRA block weights). Keys the model lacks raise KeyError."""
        if set_id in self._sets:
            raise ValueError(f"a patch set named {set_id!r} is already on this model")
        frozen = {k: tuple(v) for k, v in patches.items() if v}
        for key in frozen:
            get_tensor(self.model, key)  # raises KeyError for a key the model lacks
        self._sets[set_id] = PatchSet(set_id, frozen, float(strength), scales=dict(scales or {}))
        return list(frozen)

    def set_strength(self, set_id: str, strength: float) -> None:
        self._sets[set_id] = replace(self._sets[set_id], strength=float(strength))

    def set_scales(self, set_id: str, scales: Mapping[str, float]) -> None:
        """New per-key multipliers of a set's strength (block weights); ``apply()`` bakes them."""
        self._sets[set_id] = replace(self._sets[set_id], scales=dict(scales))

    def set_enabled(self, set_id: str, enabled: bool) -> None:
        self._sets[set_id] = replace(self._sets[set_id], enabled=enabled)

    def remove(self, set_id: str) -> None:
        """Take a patch set off the stack (call ``apply()`` to restore its weights). Its cached
        deltas are freed (a clone still using the same adapters computes them again)."""
        self.forget_deltas(set_id)
        del self._sets[set_id]

    def reorder(self, order: Sequence[str]) -> None:
        if sorted(order) != sorted(self._sets):
            raise ValueError("the new order must name every patch set once")
        self._sets = {k: self._sets[k] for k in order}

    @property
    def sets(self) -> tuple[PatchSet, ...]:
        return tuple(self._sets.values())

    def patched_keys(self) -> set[str]:
        return {k for s in self._sets.values() if s.active for k in s.patches if s.patches_key(k)}

    def signature(self, key: str) -> Signature:
        return tuple(
            (s.id, s.strength_of(key), i)
            for s in self._sets.values()
            if s.patches_key(key)
            for i in range(len(s.patches[key]))
        )

    def identity(self) -> tuple[object, ...]:
        """Equal for two patchers whose stacks give the same model (the memory manager uses it
        to recognise a model that is already loaded with the same patches)."""
        sets = tuple(
            (s.id, s.strength, s.enabled, tuple(sorted(s.scales.items()))) for s in self._sets.values()
        )
        objects = tuple(sorted((path, id(value)) for path, value in self._objects.items()))
        return (sets, objects)

    def _stack(self, key: str) -> list[tuple[PatchSet, KeyPatch]]:
        return [(s, p) for s in self._sets.values() if s.patches_key(key) for p in s.patches[key]]

    # -- computing weights ------------------------------------------------------------------------
    def original(self, key: str) -> Tensor:
        """The unpatched weight (the backup when the key is patched)."""
        return self._state.backups.get(key, get_tensor(self.model, key))

    def patched_weight(
        self, key: str, base: Tensor | None = None, *, cache: bool = True
    ) -> tuple[Tensor, bool]:
        """The weight of ``key`` with this patcher's stack applied to ``base`` (the original by
        default), and whether only cached deltas were used. ``base`` may live on another device
        (the lowvram path patches a weight at cast time); ``cache=False`` keeps the deltas it
        computes out of the cache (the mover passes it for device copies: a cache there would hold
        device memory the memory manager does not see)."""
        weight = self.original(key) if base is None else base
        stack = self._stack(key)
        if not stack:
            return weight, True
        weight = _padded(key, weight, stack)
        if isinstance(weight, DeferredWeight) or weight.dtype in FP8_DTYPES:
            return self._deferred(key, weight, stack, cache), False
        if any(p.function is not None for _, p in stack):
            return self._sequential(key, weight, stack), False
        patches = [Patch(p.adapter, s.strength_of(key), p.offset) for s, p in stack]
        if not fusable(weight, patches) and all(
            p.adapter.is_additive and p.adapter.linear_in_strength for _, p in stack
        ):
            return self._from_deltas(key, weight, stack, cache)
        # Plain LoRA stacks bake fused from their factors (no delta is worth caching: computing
        # one costs as much as the bake); the rest has no shortcut.
        return apply_patches(weight, patches, intermediate_dtype=self.intermediate_dtype), False

    def _deferred(
        self, key: str, weight: Tensor, stack: list[tuple[PatchSet, KeyPatch]], cache: bool
    ) -> DeferredWeight:
        """A quantized or fp8 weight is never requantized nor held dense: it gets the stack as it
        is now, to apply at each forward to the weight materialized in the compute dtype (the op
        layers call it). Shapes are checked now, so a mismatched LoRA still fails here.

        The alternative for fp8, a resident patched copy in the compute dtype, would hold 2 (fp16,
        bf16) to 4 (fp32) times the fp8 bytes for every patched layer -- what makes a LoRA double
        an fp8 model's memory in ComfyUI -- where this holds only the fp8 bytes plus one layer's
        upcast weight during its forward; the price is the patch's arithmetic at each forward."""
        for _, p in stack:
            shape = list(logical_shape(weight))
            if p.offset is not None:
                shape[p.offset[0]] = p.offset[2]
            p.adapter.check(torch.Size(shape))
        frozen = self.clone()

        def patch(dense: Tensor) -> Tensor:
            return frozen.patched_weight(key, dense, cache=cache)[0]

        if isinstance(weight, DeferredWeight):
            return weight.with_patch(patch)
        return fp8_with_patch(weight, patch)

    def _sequential(self, key: str, weight: Tensor, stack: list[tuple[PatchSet, KeyPatch]]) -> Tensor:
        """Patches one after the other with their functions (the path with no shortcut)."""
        for _, p in stack:
            p.adapter.check((weight if p.offset is None else weight.narrow(*p.offset)).shape)
        work = weight.to(self.intermediate_dtype, copy=True)
        for s, p in stack:
            view = work if p.offset is None else work.narrow(*p.offset)
            if s.strength_of(key) != 0:
                view.add_(p.adapter.difference(view, float(s.strength_of(key))))
            if p.function is not None:
                view.copy_(p.function(view))
        return work.to(weight.dtype)

    def _delta(
        self, key: str, patch: KeyPatch, shape: torch.Size, device: torch.device, cache: bool = True
    ) -> tuple[Tensor, bool]:
        state = self._state
        ident = (id(patch.adapter), key, patch.offset)
        entry = state.deltas.get(ident)
        if entry is not None and entry[0] is patch.adapter and entry[1].device == device:
            return entry[1], True
        delta = patch.adapter.delta(shape, dtype=self.intermediate_dtype, device=device)
        size = delta.numel() * delta.element_size()
        if cache and entry is None and state.delta_bytes + size <= self.delta_cache_bytes:
            state.deltas[ident] = (patch.adapter, delta)
            state.delta_bytes += size
        return delta, False

    def _from_deltas(
        self, key: str, weight: Tensor, stack: list[tuple[PatchSet, KeyPatch]], cache: bool = True
    ) -> tuple[Tensor, bool]:
        # Same operations, in the same order, as apply_patches: bit-identical results.
        for _, p in stack:
            target = weight if p.offset is None else weight.narrow(*p.offset)
            p.adapter.check(target.shape)
        work = weight.to(self.intermediate_dtype, copy=True)
        all_cached = True
        for s, p in stack:
            view = work if p.offset is None else work.narrow(*p.offset)
            delta, hit = self._delta(key, p, view.shape, work.device, cache)
            all_cached = all_cached and hit
            view.add_(delta * s.strength_of(key))
        return work.to(weight.dtype), all_cached

    # -- applying ---------------------------------------------------------------------------------
    def apply(self, keys: Iterable[str] | None = None) -> ApplyReport:
        """Make the module's weights match this patcher's stack, recomputing only what changed."""
        t0 = time.perf_counter()
        state = self._state
        wanted = self.patched_keys()
        candidates = set(keys) if keys is not None else wanted | set(state.applied)
        recomputed = restored = unchanged = cached = 0
        clear_side_outputs(self.model)  # baking makes every preview side path redundant
        self._apply_objects()
        for key in sorted(candidates):
            sig = self.signature(key)
            if state.applied.get(key, ()) == sig:
                unchanged += 1 if sig else 0
                continue
            if not sig:
                set_tensor(self.model, key, state.backups.pop(key))
                del state.applied[key]
                restored += 1
                continue
            if key not in state.backups:
                state.backups[key] = get_tensor(self.model, key).data
            weight, all_cached = self.patched_weight(key)
            set_tensor(self.model, key, weight)
            state.applied[key] = sig
            recomputed += 1
            cached += int(all_cached)
        return ApplyReport(recomputed, restored, unchanged, cached, time.perf_counter() - t0)

    # -- live preview (a slider moving) ------------------------------------------------------------
    def _baked_strength(self, set_id: str, key: str) -> float:
        for sid, strength, _ in self._state.applied.get(key, ()):
            if sid == set_id:
                return strength
        return 0.0

    def preview(self) -> bool:
        """Make the module's output follow the recorded strengths at once, without rewriting a
        weight: each set whose strength differs from the one baked in runs the difference as a
        low-rank side path (see ``core.patching.side``). Returns False and changes nothing when a
        changed set has adapters without a side path (then call ``apply()``)."""
        sides: dict[str, list[LoraSidePath]] = {}
        for s in self._sets.values():
            for key, patches in s.patches.items():
                wanted = s.strength_of(key) if s.enabled else 0.0
                extra = wanted - self._baked_strength(s.id, key)
                if extra == 0:
                    continue
                if not key.endswith(".weight"):
                    return False
                for p in patches:
                    if p.pad_to is not None or not has_side_path(p.adapter, p.offset):
                        return False
                    assert isinstance(p.adapter, LoRAAdapter)
                    sides.setdefault(key[: -len(".weight")], []).append(
                        LoraSidePath(p.adapter, extra, p.offset)
                    )
        baked_sets = {sid for sig in self._state.applied.values() for sid, _, _ in sig}
        if baked_sets - set(self._sets):
            return False  # a removed set is still baked in: only apply() can take it out
        clear_side_outputs(self.model)
        set_side_outputs(self.model, {name: tuple(paths) for name, paths in sides.items()})
        return True

    def unpatch(self) -> int:
        """Put every original weight back (bit-exact). Returns how many keys were restored."""
        state = self._state
        clear_side_outputs(self.model)
        for path, original in state.object_backups.items():
            owner, leaf = self._owner_of(path)
            setattr(owner, leaf, original)
        state.object_backups.clear()
        state.objects_applied.clear()
        n = len(state.backups)
        for key, original in state.backups.items():
            set_tensor(self.model, key, original)
        state.backups.clear()
        state.applied.clear()
        return n

    def forget_deltas(self, set_id: str | None = None) -> None:
        """Drop cached deltas (of one set, or all) to free memory."""
        state = self._state
        if set_id is None:
            state.deltas.clear()
            state.delta_bytes = 0
            return
        ids = {id(p.adapter) for ps in self._sets[set_id].patches.values() for p in ps}
        for ident in [i for i in state.deltas if i[0] in ids]:
            _, t = state.deltas.pop(ident)
            state.delta_bytes -= t.numel() * t.element_size()


def _padded(key: str, weight: Tensor, stack: Sequence[tuple[PatchSet, KeyPatch]]) -> Tensor:
    """The weight widened with zeros to the largest shape its patches ask for (ComfyUI's
    ``pad_tensor_to_shape`` before a ``reshape_weight`` LoRA's change); the weight itself when none
    asks. The original stays the backup, so taking the patches off restores it."""
    shapes = [p.pad_to for _, p in stack if p.pad_to is not None]
    if not shapes:
        return weight
    wide = tuple(max(dims) for dims in zip(weight.shape, *shapes, strict=True))
    if wide == tuple(weight.shape):
        return weight
    if isinstance(weight, DeferredWeight):
        raise LoadoutError(
            f"{key} cannot be widened: the layer is stored quantized",
            why="a FLUX.1 control LoRA widens the model's input layer, which here is a quantized weight",
            fix="Use a model file whose img_in is not quantized (fp16, bf16, fp8), or the full "
            "Canny/Depth model",
            code="unsupported_variant",
        )
    out = torch.zeros(wide, dtype=weight.dtype, device=weight.device)
    out[tuple(slice(0, d) for d in weight.shape)] = weight
    return out
