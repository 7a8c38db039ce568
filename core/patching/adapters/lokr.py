"""LoKr (Kronecker product): ``dW = kron(w1, w2)``.

Shapes (LyCORIS): ``lokr_w1 [a, c]`` or ``lokr_w1_a [a, r] @ lokr_w1_b [r, c]``; ``lokr_w2
[b, d(, kh, kw)]``, or ``lokr_w2_a [b, r] @ lokr_w2_b [r, d*kh*kw]``, or the Tucker form
``lokr_t2 [r, r, kh, kw]`` with ``lokr_w2_a [r, b]``, ``lokr_w2_b [r, d]``. The result is
``[a*b, c*d(, kh, kw)]``. ``alpha / rank`` applies only when a side is decomposed, with the rank taken
from ``lokr_w2_b`` (else ``lokr_w1_b``) as ComfyUI does; two full factors are never scaled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

import torch
from torch import Tensor

from core.patching.adapters.base import DoraAxis, LowRankAdapter, flat, move, require
from core.patching.adapters.errors import bad_factors
from core.patching.adapters.loha import tucker_rebuild


def kron_product(w1: Tensor, w2: Tensor) -> Tensor:
    """``kron(w1, w2)``, ``w1`` given trailing unit dims to match a conv ``w2`` (pure)."""
    w1 = w1.reshape(*w1.shape, *([1] * (w2.ndim - w1.ndim)))
    return torch.kron(w1.contiguous(), w2.contiguous())


@dataclass(frozen=True, eq=False)
class LoKrAdapter(LowRankAdapter):
    name = "lokr"
    markers = frozenset({"lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b", "lokr_t2"})
    parts = markers

    w1: Tensor | None = None
    w1_a: Tensor | None = None
    w1_b: Tensor | None = None
    w2: Tensor | None = None
    w2_a: Tensor | None = None
    w2_b: Tensor | None = None
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
        if "lokr_w1" not in factors:
            require(factors, ("lokr_w1_a", "lokr_w1_b"), module, cls.name)
        if "lokr_w2" not in factors:
            require(factors, ("lokr_w2_a", "lokr_w2_b"), module, cls.name)
        return cls(
            factors.get("lokr_w1"),
            factors.get("lokr_w1_a"),
            factors.get("lokr_w1_b"),
            factors.get("lokr_w2"),
            factors.get("lokr_w2_a"),
            factors.get("lokr_w2_b"),
            factors.get("lokr_t2"),
            alpha=alpha,
            dora_scale=dora_scale,
            dora_axis=dora_axis,
            module=module,
        )

    def tensors(self) -> dict[str, Tensor | None]:
        return {
            "lokr_w1": self.w1,
            "lokr_w1_a": self.w1_a,
            "lokr_w1_b": self.w1_b,
            "lokr_w2": self.w2,
            "lokr_w2_a": self.w2_a,
            "lokr_w2_b": self.w2_b,
            "lokr_t2": self.t2,
        }

    def validate(self) -> None:
        w1_pair = self.w1_a is not None and self.w1_b is not None
        w2_pair = self.w2_a is not None and self.w2_b is not None
        if (self.w1 is None) == (not w1_pair) or (self.w2 is None) == (not w2_pair):
            raise bad_factors(
                self.module,
                "each LoKr side needs either its full factor or both halves (lokr_wN_a, lokr_wN_b)",
            )
        if self.t2 is not None and self.w2 is not None:
            raise bad_factors(self.module, "lokr_t2 only goes with lokr_w2_a and lokr_w2_b")
        for a, b, core in ((self.w1_a, self.w1_b, None), (self.w2_a, self.w2_b, self.t2)):
            if a is None or b is None:
                continue
            ok = a.ndim == 2 and b.ndim >= 2
            if core is not None:
                ok = ok and core.ndim >= 2 and (core.shape[0], core.shape[1]) == (a.shape[0], b.shape[0])
            else:
                ok = ok and a.shape[1] == b.shape[0]
            if not ok:
                raise bad_factors(
                    self.module,
                    f"LoKr halves {list(a.shape)} and {list(b.shape)}"
                    + (f" with core {list(core.shape)}" if core is not None else "")
                    + " disagree on the rank",
                )
        if len(self._w1_shape()) != 2:
            raise bad_factors(self.module, f"lokr_w1 must be a matrix, not {list(self._w1_shape())}")

    def _w1_shape(self) -> tuple[int, ...]:
        if self.w1 is not None:
            return tuple(self.w1.shape)
        assert self.w1_a is not None and self.w1_b is not None
        return (self.w1_a.shape[0], *self.w1_b.shape[1:])

    def _w2_shape(self) -> tuple[int, ...]:
        if self.w2 is not None:
            return tuple(self.w2.shape)
        assert self.w2_a is not None and self.w2_b is not None
        if self.t2 is not None:
            return (self.w2_a.shape[1], self.w2_b.shape[1], *self.t2.shape[2:])
        return (self.w2_a.shape[0], math.prod(self.w2_b.shape[1:]))

    @property
    def rank(self) -> int | None:
        if self.w2_b is not None:
            return int(self.w2_b.shape[0])
        if self.w1_b is not None:
            return int(self.w1_b.shape[0])
        return None

    def target_shape(self) -> tuple[int, ...]:
        w1, w2 = self._w1_shape(), self._w2_shape()
        w1 = w1 + (1,) * (len(w2) - len(w1))
        return tuple(x * y for x, y in zip(w1, w2, strict=True))

    def product(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        if self.w1 is not None:
            w1 = move(self.w1, dtype, device)
        else:
            assert self.w1_a is not None and self.w1_b is not None
            w1 = move(self.w1_a, dtype, device) @ flat(move(self.w1_b, dtype, device))
        if self.w2 is not None:
            w2 = move(self.w2, dtype, device)
        else:
            assert self.w2_a is not None and self.w2_b is not None
            a, b = move(self.w2_a, dtype, device), move(self.w2_b, dtype, device)
            w2 = tucker_rebuild(move(self.t2, dtype, device), a, b) if self.t2 is not None else a @ flat(b)
        return kron_product(w1, w2)
