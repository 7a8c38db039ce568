"""LoRAs running unbaked, beside the weight: ``out += extra * scale * up(down(x))``.

While a strength slider moves, rewriting every weight a LoRA touches costs seconds on a large
model. Instead the change in strength since the last bake runs as a low-rank side path through
the ops layers: setting it is instant and each forward pays two thin matmuls per patched layer.
When the slider stops, the stack is baked (only the keys that LoRA touches) and the side paths go.

Only plain LoRA on linear layers and LoCon without a Tucker ``mid`` on 2-D convolutions have an
exact low-rank side path; other adapters (LoHa, LoKr, DoRA, OFT...) are baked directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.patching.adapters.base import Adapter
from core.patching.adapters.lora import LoConAdapter, LoRAAdapter
from core.patching.adapters.slices import Offset


def has_side_path(adapter: Adapter, offset: Offset | None) -> bool:
    if type(adapter) not in (LoRAAdapter, LoConAdapter):
        return False
    lora = adapter
    assert isinstance(lora, LoRAAdapter)
    return lora.dora_scale is None and lora.mid is None and (offset is None or offset[0] == 0)


@dataclass(frozen=True, eq=False)
class LoraSidePath:
    """One LoRA's extra contribution to one layer's output, at ``strength`` (the difference
    between the strength the user set and the one baked into the weight)."""

    adapter: LoRAAdapter
    strength: float
    offset: Offset | None = None
    #: the factors as the forward uses them, per (device, dtype): copied from the host on the
    #: first forward that needs them, never again (each copy to a GPU makes the CPU wait for it)
    _factors: dict[tuple[torch.device, torch.dtype], tuple[Tensor, Tensor]] = field(
        default_factory=dict, init=False, repr=False
    )

    def factors(self, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """(down, up) on ``device`` in ``dtype``."""
        found = self._factors.get((device, dtype))
        if found is None:
            a = self.adapter
            found = self._factors[(device, dtype)] = (
                a.down.to(device=device, dtype=dtype, non_blocking=True),
                a.up.to(device=device, dtype=dtype, non_blocking=True),
            )
        return found

    def __call__(self, layer: nn.Module, x: Tensor, out: Tensor) -> Tensor:
        a = self.adapter
        coef = self.strength * a.scale
        down, up = self.factors(x.device, x.dtype)
        if isinstance(layer, nn.Conv2d):
            h = F.conv2d(x, down, None, layer.stride, layer.padding, layer.dilation)
            extra = F.conv2d(h, up.reshape(up.shape[0], up.shape[1], 1, 1)) * coef
            channel_dim = 1
        else:
            extra = F.linear(F.linear(x, down.flatten(1)), up.flatten(1)) * coef
            channel_dim = -1
        if self.offset is None:
            return out + extra
        _, start, length = self.offset
        out = out.clone()
        out.narrow(channel_dim, start, length).add_(extra)
        return out


def set_side_outputs(module: nn.Module, sides: dict[str, tuple[LoraSidePath, ...]]) -> None:
    """Give each named layer its side paths (an empty tuple removes them)."""
    for name, paths in sides.items():
        layer = module.get_submodule(name) if name else module
        if not hasattr(type(layer), "side_outputs"):
            raise TypeError(f"layer {name!r} ({type(layer).__name__}) is not a core.ops layer")
        layer.side_outputs = paths  # type: ignore[assignment]


def clear_side_outputs(module: nn.Module) -> int:
    n = 0
    for layer in module.modules():
        if getattr(layer, "side_outputs", ()):
            layer.side_outputs = ()  # type: ignore[assignment]
            n += 1
    return n
