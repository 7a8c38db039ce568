"""What most text conventions share: towers as data, a combine function and the pooled vector
the network takes (a convention package writes one :class:`Convention` per prompt encoding)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from core.archs.conditioning import Conditioning
from core.archs.protocols import ExtraInputs, TextOutput, TowerOutput, TowerSpec

Combine = Callable[[Mapping[str, TowerOutput]], TextOutput]
#: (the prompt's pooled vector, the extra inputs) -> what the network takes as its pooled input
Pooled = Callable[[Tensor | None, ExtraInputs], Tensor | None]


def first_tower(outputs: Mapping[str, TowerOutput]) -> TextOutput:
    """One tower's hidden states and pooled vector as they are."""
    out = next(iter(outputs.values()))
    return TextOutput(out.hidden, out.pooled, out.mask)


def no_pooled(pooled: Tensor | None, extra: ExtraInputs) -> Tensor | None:
    return None


def pooled_as_is(pooled: Tensor | None, extra: ExtraInputs) -> Tensor | None:
    return pooled


def cat_channels(a: Tensor, b: Tensor) -> Tensor:
    """Two towers' hidden states side by side (the shorter token count kept)."""
    cut = min(a.shape[1], b.shape[1])
    return torch.cat([a[:, :cut], b[:, :cut]], dim=-1)


@dataclass(frozen=True)
class Convention:
    """A :class:`~core.archs.protocols.TextConvention` from parts. ``guidance``: the distilled
    guidance the network takes when the user sets none (None: it takes none); ``pictures``: its
    towers read the reference pictures."""

    id: str
    towers: tuple[TowerSpec, ...]
    combine_outputs: Combine = first_tower
    pooled: Pooled = no_pooled
    guidance: float | None = None
    #: reads the reference pictures (a vision tower: :class:`~core.archs.references.PromptPictures`)
    pictures: bool = False

    def combine(self, outputs: Mapping[str, TowerOutput]) -> TextOutput:
        return self.combine_outputs(outputs)

    def network_inputs(self, text: TextOutput, extra: ExtraInputs) -> Conditioning:
        guidance = None
        if self.guidance is not None:
            g = extra.guidance if extra.guidance is not None else self.guidance
            guidance = torch.tensor([float(g)])
        return Conditioning(text.context, self.pooled(text.pooled, extra), guidance, text.mask)
