"""LoHa (Hadamard product of two low-rank products): ``dW = (w1_a @ w1_b) * (w2_a @ w2_b)``.

Shapes (LyCORIS): ``hada_w1_a [out, r]``, ``hada_w1_b [r, in*kh*kw]`` (likewise ``w2``); with the
CP/Tucker form ``hada_t1 [r, r, kh, kw]``, ``hada_w1_a [r, out]``, ``hada_w1_b [r, in]`` and each half
is ``t1 x_0 w1_a x_1 w1_b``. The scale is ``alpha / rank`` with ``rank = hada_w1_b.shape[0]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

import torch
from torch import Tensor

from core.patching.adapters.base import DoraAxis, LowRankAdapter, flat, move, require
from core.patching.adapters.errors import bad_factors


def tucker_rebuild(core: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``[out, in, *kernel]`` from a CP/Tucker core ``[r1, r2, *kernel]``, ``a [r1, out]``, ``b [r2, in]``."""
    return torch.einsum("i j ..., i p, j q -> p q ...", core, a, b)


def hada_half(a: Tensor, b: Tensor, t: Tensor | None) -> Tensor:
    """One factor of the Hadamard product, ``[out, in*k]`` (plain) or ``[out, in, *kernel]`` (Tucker)."""
    if t is not None:
        return tucker_rebuild(t, a, b)
    return a @ flat(b)


def _half_shape(a: Tensor, b: Tensor, t: Tensor | None) -> tuple[int, ...]:
    if t is not None:
        return (a.shape[1], b.shape[1], *t.shape[2:])
    return (a.shape[0], *b.shape[1:])


@dataclass(frozen=True, eq=False)
class LoHaAdapter(LowRankAdapter):
    name = "loha"
    markers = frozenset({"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2"})
    parts = markers

    w1_a: Tensor
    w1_b: Tensor
    w2_a: Tensor
    w2_b: Tensor
    t1: Tensor | None = None
    t2: Tensor | None = None

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
        require(factors, ("hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"), module, cls.name)
        return cls(
            factors["hada_w1_a"],
            factors["hada_w1_b"],
            factors["hada_w2_a"],
            factors["hada_w2_b"],
            factors.get("hada_t1"),
            factors.get("hada_t2"),
            alpha=alpha,
            dora_scale=dora_scale,
            dora_axis=dora_axis,
            module=module,
        )

    def tensors(self) -> dict[str, Tensor | None]:
        return {
            "hada_w1_a": self.w1_a,
            "hada_w1_b": self.w1_b,
            "hada_w2_a": self.w2_a,
            "hada_w2_b": self.w2_b,
            "hada_t1": self.t1,
            "hada_t2": self.t2,
        }

    def validate(self) -> None:
        if (self.t1 is None) != (self.t2 is None):
            raise bad_factors(self.module, "a Tucker LoHa needs both hada_t1 and hada_t2")
        for a, b, t in ((self.w1_a, self.w1_b, self.t1), (self.w2_a, self.w2_b, self.t2)):
            if a.ndim != 2 or b.ndim < 2:
                raise bad_factors(
                    self.module, f"hada factors {list(a.shape)}, {list(b.shape)} must be matrices"
                )
            ranks = (a.shape[0], b.shape[0]) if t is not None else (a.shape[1], b.shape[0])
            core = (t.shape[0], t.shape[1]) if t is not None else ranks
            if ranks[0] != core[0] or ranks[1] != core[1] or (t is None and ranks[0] != ranks[1]):
                raise bad_factors(
                    self.module,
                    f"hada factors {list(a.shape)} and {list(b.shape)}"
                    + (f" with core {list(t.shape)}" if t is not None else "")
                    + " disagree on the rank",
                )
        first = _half_shape(self.w1_a, self.w1_b, self.t1)
        second = _half_shape(self.w2_a, self.w2_b, self.t2)
        if first != second:
            raise bad_factors(
                self.module, f"the two Hadamard factors have shapes {list(first)} and {list(second)}"
            )

    @property
    def rank(self) -> int:
        return int(self.w1_b.shape[0])

    def target_shape(self) -> tuple[int, ...]:
        return _half_shape(self.w1_a, self.w1_b, self.t1)

    def product(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        w1 = hada_half(
            move(self.w1_a, dtype, device), move(self.w1_b, dtype, device), move(self.t1, dtype, device)
        )
        w2 = hada_half(
            move(self.w2_a, dtype, device), move(self.w2_b, dtype, device), move(self.t2, dtype, device)
        )
        return (w1 * w2).reshape(self.target_shape())
