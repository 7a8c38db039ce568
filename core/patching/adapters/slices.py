"""Applying adapters to a slice of a weight, and a stack of adapters in one pass.

Fused layers (Flux ``qkv``, ``linear1``) receive separate LoRAs for q, k and v; each patches a
slice ``(dim, start, length)`` of the fused weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from core.errors import ModelMismatchError
from core.patching.adapters.base import Adapter
from core.patching.adapters.fused import bake_lora_stack, fusable

#: ``(dim, start, length)`` of the part of a weight an adapter patches.
Offset = tuple[int, int, int]


@dataclass(frozen=True, eq=False)
class Patch:
    """One adapter at one strength, on the whole weight or on a slice of it."""

    adapter: Adapter
    strength: float
    offset: Offset | None = None


def _narrow(weight: Tensor, offset: Offset | None, module: str) -> Tensor:
    if offset is None:
        return weight
    dim, start, length = offset
    ok = -weight.ndim <= dim < weight.ndim and start >= 0 and length > 0
    if not ok or start + length > weight.shape[dim]:
        raise ModelMismatchError(
            f"The slice (dim {dim}, start {start}, length {length}) of adapter module {module!r} "
            f"lies outside the weight of shape {list(weight.shape)}",
            why="the adapter was made for a model whose fused layers are laid out differently",
            fix="use an adapter made for this model, or leave this module out",
            code="shape_mismatch",
        )
    return weight.narrow(dim, start, length)


def apply_patches(
    weight: Tensor, patches: Sequence[Patch], *, intermediate_dtype: torch.dtype = torch.float32
) -> Tensor:
    """The weight with every patch applied in order; one cast back to the weight's dtype at the end.

    Shapes are checked for every patch before any work; ``weight`` is never mutated. A stack of
    plain LoRAs (the common case) is baked fused, block by block (``fused.bake_lora_stack``).
    """
    for patch in patches:
        patch.adapter.check(_narrow(weight, patch.offset, patch.adapter.module).shape)
    if fusable(weight, patches):
        return bake_lora_stack(weight, patches, intermediate_dtype)
    work = weight.to(intermediate_dtype, copy=True)
    for patch in patches:
        if patch.strength == 0:
            continue
        view = _narrow(work, patch.offset, patch.adapter.module)
        view.add_(patch.adapter.difference(view, float(patch.strength)))
    return work.to(weight.dtype)


def apply_to_slice(
    weight: Tensor,
    adapter: Adapter,
    strength: float,
    offset: Offset | None,
    *,
    intermediate_dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The full new weight with ``adapter`` applied to the slice ``offset`` (the whole weight if None)."""
    if offset is None:
        return adapter.apply(weight, strength, intermediate_dtype=intermediate_dtype)
    return apply_patches(weight, [Patch(adapter, strength, offset)], intermediate_dtype=intermediate_dtype)
