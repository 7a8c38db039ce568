"""GLoRA: ``dW = (alpha / rank) * (W @ A1 @ A2 + B1 @ B2)``, a weight-dependent low-rank patch.

Shapes (LyCORIS): ``a1 [in, r(, 1, 1)]``, ``a2 [r, in(, 1, 1)]``, ``b1 [out, r(, 1, 1)]``,
``b2 [r, in(, kh, kw)]``; ``rank = a2.shape[0]``. On a conv, ``W @ A1 @ A2`` contracts the input
channel dim only. The older layout (``a1 [r, in]``, ``a2 [in, r]``, ``b1 [r, in]``, ``b2 [out, r]``,
``dW = W @ a2 @ a1 + b2 @ b1``) is read too, told apart by the shapes as ComfyUI does; when both
readings fit (rank equal to every dim) the current layout wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Self

import torch
from torch import Tensor

from core.patching.adapters.base import Adapter, DoraAxis, flat, refuse_dora, require
from core.patching.adapters.errors import bad_factors, check_finite_scalar, shape_mismatch


def glora_difference(weight: Tensor, a1: Tensor, a2: Tensor, b1: Tensor, b2: Tensor, scale: float) -> Tensor:
    """``scale * (W x_1 (a1 @ a2) + b1 @ b2)`` with matrices ``a1 [in, r]``, ``a2 [r, in]`` (pure)."""
    mixed = torch.einsum("o i ..., i r -> o r ...", weight, a1)
    mixed = torch.einsum("o r ..., r j -> o j ...", mixed, a2)
    return (mixed + (b1 @ b2).reshape(weight.shape)) * scale


@dataclass(frozen=True, eq=False)
class GLoRAAdapter(Adapter):
    name = "glora"
    markers = frozenset({"a1", "a2", "b1", "b2"})
    parts = markers

    a1: Tensor
    a2: Tensor
    b1: Tensor
    b2: Tensor
    alpha: float | None = field(default=None, kw_only=True)

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
        require(factors, ("a1", "a2", "b1", "b2"), module, cls.name)
        refuse_dora(dora_scale, module, cls.name)
        return cls(factors["a1"], factors["a2"], factors["b1"], factors["b2"], alpha=alpha, module=module)

    def tensors(self) -> dict[str, Tensor | None]:
        return {"a1": self.a1, "a2": self.a2, "b1": self.b1, "b2": self.b2}

    def _is_current_layout(self) -> bool:
        return _current_layout(*(flat(t) for t in (self.a1, self.a2, self.b1, self.b2)))

    def _ordered(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(a1, a2, b1, b2)`` in the current layout (the older layout's roles swapped)."""
        if self._is_current_layout():
            return self.a1, self.a2, self.b1, self.b2
        return self.a2, self.a1, self.b2, self.b1

    def _matrices(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(a1 [in, r], a2 [r, in], b1 [out, r], b2 [r, in*k])``."""
        a1, a2, b1, b2 = self._ordered()
        return flat(a1), flat(a2), flat(b1), flat(b2)

    def validate(self) -> None:
        check_finite_scalar(self.module, "alpha", self.alpha)
        if any(t.ndim < 2 for t in (self.a1, self.a2, self.b1, self.b2)):
            raise bad_factors(self.module, "GLoRA factors must be matrices")
        a1, a2, b1, b2 = (flat(t) for t in (self.a1, self.a2, self.b1, self.b2))
        if not (_current_layout(a1, a2, b1, b2) or _current_layout(a2, a1, b2, b1)):
            shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in self.tensors().items() if t is not None)
            raise bad_factors(self.module, f"GLoRA factors {shapes} do not agree on a rank")
        a1, a2, _, _ = self._matrices()
        if a1.shape[0] != a2.shape[1]:
            raise bad_factors(self.module, "GLoRA's A factors must map the input dim onto itself")

    @property
    def rank(self) -> int:
        return int(self._matrices()[1].shape[0])

    @property
    def scale(self) -> float:
        return 1.0 if self.alpha is None else self.alpha / self.rank

    def target_shape(self) -> tuple[int, ...]:
        _, _, b1, b2 = self._ordered()
        return (b1.shape[0], *b2.shape[1:])

    def check(self, weight_shape: Sequence[int]) -> None:
        super().check(weight_shape)
        a1 = self._matrices()[0]
        if len(weight_shape) < 2 or weight_shape[1] != a1.shape[0]:
            raise shape_mismatch(
                self.module, self.target_shape(), weight_shape, "GLoRA's A factors do not fit"
            )

    def difference(self, weight: Tensor, strength: float) -> Tensor:
        a1, a2, b1, b2 = (t.to(device=weight.device, dtype=weight.dtype) for t in self._matrices())
        return glora_difference(weight, a1, a2, b1, b2, self.scale * strength)


def _current_layout(a1: Tensor, a2: Tensor, b1: Tensor, b2: Tensor) -> bool:
    return a1.shape[1] == a2.shape[0] == b1.shape[1] == b2.shape[0]
