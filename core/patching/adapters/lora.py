"""LoRA and LoCon: ``dW = up @ down`` scaled by ``alpha / rank``, with an optional Tucker ``mid``.

Shapes (kohya, LyCORIS, PEFT ``lora_B``/``lora_A``, diffusers): ``up [out, r(, 1, 1)]``,
``down [r, in(, kh, kw)]``; LoCon with Tucker: ``down [r, in, 1, 1]``, ``mid [r, r, kh, kw]``,
where ``mid`` is contracted with ``down`` first. ``rank = down.shape[0]``.
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


def lora_product(up: Tensor, down: Tensor, mid: Tensor | None) -> Tensor:
    """``up @ (mid x down)`` in the factors' dtype, shaped ``[out, in, *kernel]`` (pure)."""
    if mid is not None:
        # mid [r_up, r_down, kh, kw] contracted with down [r_down, in]: [r_up, in, kh, kw]
        down = torch.einsum("i j ..., j c -> i c ...", mid, flat(down))
        shape = (up.shape[0], down.shape[1], *mid.shape[2:])
    else:
        shape = (up.shape[0], *down.shape[1:])
    return (flat(up) @ flat(down)).reshape(shape)


@dataclass(frozen=True, eq=False)
class LoRAAdapter(LowRankAdapter):
    """Linear LoRA (``down`` is 2-D); ``LoConAdapter`` is the same math for conv layers."""

    name = "lora"
    markers = frozenset({"up", "down", "mid"})
    parts = markers

    up: Tensor
    down: Tensor
    mid: Tensor | None = None

    @classmethod
    def claims(cls, factors: Mapping[str, Tensor]) -> bool:
        return super().claims(factors) and not _is_conv(factors)

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
        require(factors, ("up", "down"), module, cls.name)
        return cls(
            factors["up"],
            factors["down"],
            factors.get("mid"),
            alpha=alpha,
            dora_scale=dora_scale,
            dora_axis=dora_axis,
            module=module,
        )

    def tensors(self) -> dict[str, Tensor | None]:
        return {"up": self.up, "down": self.down, "mid": self.mid}

    def validate(self) -> None:
        up, down, mid = self.up, self.down, self.mid
        if up.ndim < 2 or down.ndim < 2:
            raise bad_factors(
                self.module, f"up {list(up.shape)} and down {list(down.shape)} must be matrices"
            )
        rank = mid.shape[0] if mid is not None else down.shape[0]
        if math.prod(up.shape[1:]) != rank:
            raise bad_factors(
                self.module,
                f"up {list(up.shape)} must have rank {rank} as its second dim"
                + (f" (mid {list(mid.shape)})" if mid is not None else f" (down {list(down.shape)})"),
            )
        if mid is not None and (mid.ndim < 2 or mid.shape[1] != down.shape[0]):
            raise bad_factors(self.module, f"mid {list(mid.shape)} does not match down {list(down.shape)}")

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])

    def target_shape(self) -> tuple[int, ...]:
        if self.mid is not None:
            return (self.up.shape[0], self.down.shape[1], *self.mid.shape[2:])
        return (self.up.shape[0], *self.down.shape[1:])

    def product(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        return lora_product(
            move(self.up, dtype, device), move(self.down, dtype, device), move(self.mid, dtype, device)
        )


@dataclass(frozen=True, eq=False)
class LoConAdapter(LoRAAdapter):
    """LoRA for conv layers (``down`` has kernel dims, or a Tucker ``mid`` is present)."""

    name = "locon"

    @classmethod
    def claims(cls, factors: Mapping[str, Tensor]) -> bool:
        return bool(cls.markers & factors.keys()) and _is_conv(factors)


def _is_conv(factors: Mapping[str, Tensor]) -> bool:
    down = factors.get("down")
    return "mid" in factors or (down is not None and down.ndim > 2)
