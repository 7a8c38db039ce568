"""OFT and BOFT: orthogonal rotations of the output channels, from Cayley-parametrised blocks.

Per block, ``Q = B - B^T`` (scaled down to norm ``alpha * out`` when ``alpha > 0`` and ``||Q||``
exceeds it, over all blocks at once, as LyCORIS and kohya do) and ``R = (I + Q)(I - Q)^-1``.

- OFT (``oft_blocks [n, b, b]``, kohya and LyCORIS diag-OFT): the ``n*b`` output rows are split into
  ``n`` groups of ``b`` and each group is mixed by ``R^T`` (both trainers compute ``y @ R`` on the
  output, i.e. ``W' = R^T W`` per block). Strength interpolates the rotation, ``s R + (1 - s) I``,
  which is ``W + s (R^T W - W)``; an optional ``rescale [out, 1, ...]`` multiplies the rows of the
  full-strength result, ``W1 = rescale * R^T W``, and strength gives ``W + s (W1 - W)``.
- BOFT (``oft_blocks [m, n, b, b]``): ``m`` butterfly stages; stage ``i`` permutes the rows so that
  rows ``2**i * b / 2`` apart meet, mixes each group of ``b`` by ``R_i`` and permutes back. As in
  LyCORIS, strength interpolates every stage toward identity (``s R_i + (1 - s) I``), so the result
  is not linear in strength; ``rescale`` enters as ``1 + s (rescale - 1)``.

LyCORIS also folds ``rescale`` in fully at every strength; here it is interpolated so strength 0
stays a no-op (the two agree at strength 1, and everywhere without ``rescale``). ComfyUI applies
the strength twice for OFT/BOFT and ignores ``rescale`` for OFT; those are not followed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Self

import torch
from torch import Tensor

from core.patching.adapters.base import Adapter, DoraAxis, refuse_dora, require
from core.patching.adapters.errors import bad_factors, check_finite_scalar, shape_mismatch


def cayley_offset(blocks: Tensor, constraint: float) -> Tensor:
    """``R - I = 2 Q (I - Q)^-1`` for each block (exact form of ``(I + Q)(I - Q)^-1 - I``)."""
    q = blocks - blocks.transpose(-1, -2)
    if constraint > 0:
        norm = torch.linalg.vector_norm(q) + 1e-8
        q = q * torch.clamp(constraint / norm, max=1.0)
    eye = torch.eye(q.shape[-1], dtype=q.dtype, device=q.device)
    offset: Tensor = torch.linalg.solve(eye - q, 2 * q, left=False)
    return offset


def _solve_dtype(dtype: torch.dtype) -> torch.dtype:
    """The Cayley solve needs at least float32 (no half-precision solve on CPU)."""
    return torch.promote_types(dtype, torch.float32)


def _rows(rescale: Tensor, weight: Tensor) -> Tensor:
    return rescale.to(device=weight.device, dtype=weight.dtype).reshape(-1, *([1] * (weight.ndim - 1)))


@dataclass(frozen=True, eq=False)
class OFTAdapter(Adapter):
    name = "oft"
    markers = frozenset({"oft_blocks"})
    parts = frozenset({"oft_blocks", "rescale"})
    block_ndim: ClassVar[int] = 3

    blocks: Tensor
    rescale: Tensor | None = None
    #: The file's ``alpha``; the norm bound on ``Q`` is ``constraint * out`` (0: unbounded).
    constraint: float = field(default=0.0, kw_only=True)

    @classmethod
    def claims(cls, factors: Mapping[str, Tensor]) -> bool:
        blocks = factors.get("oft_blocks")
        return blocks is not None and blocks.ndim == cls.block_ndim

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
        require(factors, ("oft_blocks",), module, cls.name)
        refuse_dora(dora_scale, module, cls.name)
        return cls(factors["oft_blocks"], factors.get("rescale"), constraint=alpha or 0.0, module=module)

    def tensors(self) -> dict[str, Tensor | None]:
        return {"oft_blocks": self.blocks, "rescale": self.rescale}

    @property
    def out_features(self) -> int:
        return int(self.blocks.shape[-3] * self.blocks.shape[-1])

    def validate(self) -> None:
        check_finite_scalar(self.module, "alpha", self.constraint)
        shape = list(self.blocks.shape)
        if self.blocks.ndim != self.block_ndim or shape[-1] != shape[-2]:
            raise bad_factors(
                self.module, f"oft_blocks {shape} must be {self.block_ndim}-D with square blocks"
            )
        if self.rescale is not None and self.rescale.numel() != self.out_features:
            raise bad_factors(
                self.module, f"rescale {list(self.rescale.shape)} does not match oft_blocks {shape}"
            )

    def target_shape(self) -> tuple[int, ...]:
        """Only the output dim: the rotation applies to a weight of any input shape."""
        return (self.out_features,)

    def check(self, weight_shape: Sequence[int]) -> None:
        if len(weight_shape) < 1 or weight_shape[0] != self.out_features:
            raise shape_mismatch(
                self.module, self.target_shape(), weight_shape, "the rotation must cover every output channel"
            )

    def _offset(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        blocks = self.blocks.to(device=device, dtype=_solve_dtype(dtype))
        return cayley_offset(blocks, self.constraint * self.out_features)

    def difference(self, weight: Tensor, strength: float) -> Tensor:
        n, b = self.blocks.shape[0], self.blocks.shape[-1]
        offset = self._offset(weight.dtype, weight.device).to(weight.dtype)
        grouped = weight.reshape(n, b, -1)
        # (R - I)^T W per block: out[k, m] = sum_j (R - I)[k, j, m] W[k, j]
        change = torch.einsum("k j m, k j c -> k m c", offset, grouped).reshape(weight.shape)
        if self.rescale is not None:
            rescale = _rows(self.rescale, weight)
            change = rescale * change + (rescale - 1) * weight
        return change * strength


@dataclass(frozen=True, eq=False)
class BOFTAdapter(OFTAdapter):
    name = "boft"
    block_ndim: ClassVar[int] = 4

    def validate(self) -> None:
        super().validate()
        stages, _, b, _ = self.blocks.shape
        if b % 2 or self.out_features % (2 ** (stages - 1) * b):
            raise bad_factors(
                self.module,
                f"oft_blocks {list(self.blocks.shape)} do not form a butterfly over {self.out_features} rows",
            )

    @property
    def linear_in_strength(self) -> bool:
        return False

    def difference(self, weight: Tensor, strength: float) -> Tensor:
        stages, n, b, _ = self.blocks.shape
        rows = self.out_features
        offset = self._offset(weight.dtype, weight.device).to(weight.dtype)
        rotations = torch.eye(b, dtype=weight.dtype, device=weight.device) + strength * offset
        x = weight
        for i in range(stages):
            half = 2**i * b // 2
            # rows `half` apart become neighbours; each run of b rows is one block
            perm = torch.arange(rows, device=weight.device).reshape(-1, 2, half).transpose(1, 2).reshape(-1)
            mixed = torch.einsum("k i j, k j c -> k i c", rotations[i], x[perm].reshape(n, b, -1))
            x = mixed.reshape(weight.shape)[torch.argsort(perm)]
        if self.rescale is not None:
            x = x * (1 + strength * (_rows(self.rescale, weight) - 1))
        return x - weight
