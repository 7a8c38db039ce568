"""Full patches: ``diff`` (``W + s * diff``; also ``diff_b`` for a bias) and ``set_weight``.

``set_weight`` replaces the weight at strength 1 (exactly); other strengths interpolate,
``W + s * (set - W)``, so strength 0 leaves the weight alone like every other adapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Self

import torch
from torch import Tensor

from core.patching.adapters.base import Adapter, DoraAxis, refuse_dora, require


@dataclass(frozen=True, eq=False)
class DiffAdapter(Adapter):
    """A full-size difference: ``W + s * diff`` (a weight's ``diff`` or a bias's ``diff_b``)."""

    name = "diff"
    markers = frozenset({"diff"})
    parts = markers

    diff: Tensor

    @classmethod
    def from_parts(
        cls,
        factors: Mapping[str, Tensor],
        *,
        alpha: float | None,
        dora_scale: Tensor | None,
        dora_axis: DoraAxis | None,
        module: str,
    ) -> Self:
        require(factors, ("diff",), module, cls.name)
        refuse_dora(dora_scale, module, cls.name)
        return cls(factors["diff"], module=module)

    def tensors(self) -> dict[str, Tensor | None]:
        return {"diff": self.diff}

    @property
    def is_additive(self) -> bool:
        return True

    def target_shape(self) -> tuple[int, ...]:
        return tuple(self.diff.shape)

    def delta(self, weight_shape: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> Tensor:
        """The difference reshaped to ``weight_shape`` (not scaled by strength)."""
        self.check(weight_shape)
        return self.diff.to(device=device, dtype=dtype).reshape(tuple(weight_shape))

    def difference(self, weight: Tensor, strength: float) -> Tensor:
        return self.delta(weight.shape, dtype=weight.dtype, device=weight.device) * strength


@dataclass(frozen=True, eq=False)
class SetWeightAdapter(Adapter):
    """A replacement weight (``set_weight``)."""

    name = "set"
    markers = frozenset({"set_weight"})
    parts = markers

    weight: Tensor

    @classmethod
    def from_parts(
        cls,
        factors: Mapping[str, Tensor],
        *,
        alpha: float | None,
        dora_scale: Tensor | None,
        dora_axis: DoraAxis | None,
        module: str,
    ) -> Self:
        require(factors, ("set_weight",), module, cls.name)
        refuse_dora(dora_scale, module, cls.name)
        return cls(factors["set_weight"], module=module)

    def tensors(self) -> dict[str, Tensor | None]:
        return {"set_weight": self.weight}

    def target_shape(self) -> tuple[int, ...]:
        return tuple(self.weight.shape)

    def difference(self, weight: Tensor, strength: float) -> Tensor:
        target = self.weight.to(device=weight.device, dtype=weight.dtype).reshape(weight.shape)
        return (target - weight) * strength

    def apply(
        self, weight: Tensor, strength: float, *, intermediate_dtype: torch.dtype = torch.float32
    ) -> Tensor:
        if strength == 1:
            self.check(weight.shape)
            return self.weight.to(device=weight.device, dtype=weight.dtype, copy=True).reshape(weight.shape)
        return super().apply(weight, strength, intermediate_dtype=intermediate_dtype)
