"""One entry of a prompt's conditioning list, resolved for one latent size: ComfyUI's cond dict after
``resolve_areas_and_cond_masks_multidim`` and ``calculate_start_end_timesteps`` (areas in latent
cells, masks at the latent's size, the step range as sigmas).

A prompt (the positive or the negative side of CFG) is its base conditioning (the whole latent,
strength 1) plus any entries the run's patches add (:attr:`ModelPatches.positive_conds`); the
sampler weighs them as ComfyUI's ``calc_cond_batch`` does (:mod:`core.sampling.cond_batch`).

A **hook group** is a set of labels ("positive", "negative", a region's): the LoRAs marked with
one of an entry's labels are on while the network runs that entry, the others marked ones off
(ComfyUI's hook LoRAs on one conditioning: CreateHookLora with ConditioningSetProperties).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from torch import Tensor

from core.sampling.conditioning import Conditioning


@dataclass(frozen=True)
class LatentArea:
    """A rectangle of the latent in latent cells: ``height`` x ``width`` rows and columns from row
    ``y``, column ``x`` (ComfyUI's ``area`` tuple ``(h, w, y, x)``)."""

    height: int
    width: int
    y: int
    x: int

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.height, self.width, self.y, self.x)


@dataclass(frozen=True)
class CondEntry:
    """``cond`` None: the side's own base conditioning (the negative's copy of a positive area,
    ComfyUI's ``create_cond_with_same_area_if_none``). ``area``: the part of the latent it is run
    on (None: all of it); ``strength`` multiplies its weight; ``mask`` ``[1 or B, h, w]`` at the
    latent's size, times ``mask_strength``; the entry is skipped at sigmas above ``sigma_start``
    or below ``sigma_end`` (None: no bound). ``hooks``: the entry's hook group (ComfyUI's cond
    ``hooks``), the labels of the LoRAs that are on while it runs (:mod:`core.sampling.cond_batch`);
    empty: only the LoRAs that act everywhere."""

    cond: Conditioning | None
    area: LatentArea | None = None
    strength: float = 1.0
    mask: Tensor | None = None
    mask_strength: float = 1.0
    sigma_start: float | None = None
    sigma_end: float | None = None
    hooks: frozenset[str] = field(default_factory=frozenset)

    def acts_at(self, sigma: Tensor) -> bool:
        """Whether the entry acts at ``sigma`` (a 0-d tensor), compared in its dtype as ComfyUI
        compares (a float32 sigma equal to the bound in float32 is inside)."""
        if self.sigma_start is not None and bool(sigma > self.sigma_start):
            return False
        return not (self.sigma_end is not None and bool(sigma < self.sigma_end))


def _inside(inner: LatentArea, outer: LatentArea) -> bool:
    return (
        inner.y >= outer.y
        and inner.x >= outer.x
        and outer.height + outer.y >= inner.height + inner.y
        and outer.width + outer.x >= inner.width + inner.x
    )


def _copy_if_none(entries: list[CondEntry], c: CondEntry) -> None:
    """ComfyUI's ``create_cond_with_same_area_if_none``: unless ``entries`` has an entry of
    ``c``'s area, append ``c`` with the conditioning of the smallest entry whose area holds it
    (an entry without an area when none does; none at all: nothing)."""
    if c.area is None:
        return
    smallest: CondEntry | None = None
    for x in entries:
        if x.area is None:
            smallest = x if smallest is None else smallest
        elif _inside(c.area, x.area) and (
            smallest is None
            or smallest.area is None
            or smallest.area.height * smallest.area.width > x.area.height * x.area.width
        ):
            smallest = x
    if smallest is None or smallest.area == c.area:
        return
    entries.append(replace(c, cond=smallest.cond))


def with_area_copies(
    positive: list[CondEntry], negative: list[CondEntry]
) -> tuple[tuple[CondEntry, ...], tuple[CondEntry, ...]]:
    """Both prompts' lists with each area of one copied to the other, as ComfyUI's sampler does
    before it samples (``process_conds``): every positive entry with an area, in order, then every
    negative one (the copies just made included), through :func:`_copy_if_none`. A copy keeps
    everything of the entry it copies (mask, strength, step range, hook group) but its
    conditioning: the other prompt's own (``cond`` None) or a region of it whose area holds it."""
    pos, neg = list(positive), list(negative)
    for c in pos:
        _copy_if_none(neg, c)
    for c in neg:
        _copy_if_none(pos, c)
    return tuple(pos), tuple(neg)
