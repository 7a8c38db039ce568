"""A LoRA stack's factors kept on the compute device, beside the weights they patch.

Adapters load with their factors in host memory (views of the file). A placed weight that is
patched at forward -- a streamed layer, or a resident fp8/GGUF weight whose LoRA is applied to the
upcast values each time -- would otherwise copy every factor from the host at every forward, and
on a GPU each such copy makes the CPU wait for the card (a resident fp8 Flux with a LoRA: about
1,500 waits per step). :class:`DeviceFactors` copies each adapter's factors to the device once
(``Adapter.on_device``) and hands out a patcher twin that uses them; a stack change copies only the
factors of adapters it has not seen. The memory manager is told their size
(:attr:`DeviceFactors.nbytes`, a few MiB for a typical LoRA).
"""

from __future__ import annotations

import torch

from core.patching.adapters.base import Adapter
from core.patching.patcher import ModelPatcher, PatchSet


class DeviceFactors:
    """The device copies of the factors of the adapters a placed model's stack uses."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._twins: dict[int, tuple[Adapter, Adapter]] = {}  # id(adapter) -> (adapter, its twin)
        self._built: tuple[tuple[PatchSet, ...], ModelPatcher] | None = None

    def adapter(self, adapter: Adapter) -> Adapter:
        found = self._twins.get(id(adapter))
        if found is None or found[0] is not adapter:  # holding the adapter keeps its id unique
            found = self._twins[id(adapter)] = (adapter, adapter.on_device(self.device))
        return found[1]

    def patcher_for(self, patcher: ModelPatcher) -> ModelPatcher:
        """``patcher``'s stack as it is now, with every factor on the device (rebuilt only when
        the stack changed: a set added, removed, re-ordered or given another strength)."""
        sets = patcher.sets
        built = self._built
        if (
            built is not None
            and len(built[0]) == len(sets)
            and all(a is b for a, b in zip(built[0], sets, strict=True))
        ):
            return built[1]
        twin = patcher.with_adapters(self.adapter)
        self._built = (sets, twin)
        used = {id(p.adapter) for s in sets if s.active for ps in s.patches.values() for p in ps}
        for ident in [i for i in self._twins if i not in used]:
            del self._twins[ident]  # an adapter no longer in the stack frees its device copy
        return twin

    @property
    def nbytes(self) -> int:
        return sum(twin.factor_bytes() for _, twin in self._twins.values())

    def clear(self) -> None:
        self._twins.clear()
        self._built = None
