"""The merge arithmetic on tensors, in ComfyUI's order of operations (pure functions).

ComfyUI merges by patching model 1: each key gets patches ``(strength_patch, weight, strength_model)``
and its ``calculate_weight`` computes, in a float32 copy of the weight (its intermediate dtype),
``w *= strength_model`` (skipped at 1) and then ``w += strength_patch * other`` (skipped at 0), the
other weight cast to float32 first; a patch that is itself a patched model (ModelMergeSubtract's
output added by ModelMergeAdd) is computed the same way, first. Each operation here is one
correctly rounded float32 multiply or add, so a device, a chunking or a platform changes no bit.
"""

from __future__ import annotations

import torch

from core.merging.recipe import MergeMethod

COMPUTE = torch.float32


def patch(weight: torch.Tensor, other: torch.Tensor, strength: float, strength_model: float) -> torch.Tensor:
    """ComfyUI's "diff" patch on a float32 working copy ``weight`` (changed in place and returned)."""
    if strength_model != 1.0:
        weight.mul_(strength_model)
    if strength != 0.0:
        weight.add_(other.to(weight.device, COMPUTE) * strength)
    return weight


def working_copy(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A new float32 tensor on ``device`` holding ``t``'s values (never a view of ``t``)."""
    return t.to(device=device, dtype=COMPUTE, copy=True)


def merge_values(
    method: MergeMethod,
    ratio: float,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """The merged float32 values of one key (or one slice of it) on ``device``."""
    if method is MergeMethod.WEIGHTED:  # ModelMergeSimple: add_patches(B, 1 - ratio, ratio)
        return patch(working_copy(a, device), b, 1.0 - ratio, ratio)
    if method is MergeMethod.SUBTRACT:  # ModelMergeSubtract: add_patches(B, -multiplier, multiplier)
        return patch(working_copy(a, device), b, -ratio, ratio)
    if method is MergeMethod.ADD:  # ModelMergeAdd: add_patches(B, 1.0, 1.0)
        return patch(working_copy(a, device), b, 1.0, 1.0)
    assert c is not None, "add-difference takes three models"
    difference = patch(working_copy(b, device), c, -ratio, ratio)  # ModelMergeSubtract(B, C, m)
    return patch(working_copy(a, device), difference, 1.0, 1.0)  # ModelMergeAdd(A, that)
