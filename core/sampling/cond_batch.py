"""How the sampler weighs a prompt's conditioning entries, as ComfyUI's ``calc_cond_batch``.

For each side (positive, negative) every entry that acts at this sigma is run on its part of the
latent (``get_area_and_mult``): the area's rows and columns of the sampler's latent, its weight
``mult`` = the mask (cut to the area, times the mask strength; ones without a mask) times the
strength. An area without a mask is feathered at each edge that is not the latent's own: the
``r = min(8, side // 4)`` rows (columns) nearest that edge are multiplied by ``(t + 1) / r``
(t = 0 at the edge), each in turn, so corners take both ramps. The side's estimate is the sum of
``output * mult`` over its entries, placed at their areas, divided by the sum of the weights plus
``1e-37`` (a cell no entry covers is 0).

Entries are batched as ComfyUI batches them when the device has room (ComfyUI halves a batch on a
card without room; Loadout always runs it whole, the same up to rounding): the first entry left
and every later one whose cut latent has the same shape and whose conditioning concatenates
(:func:`core.sampling.conditioning.can_concat`) run as one call, in reverse order of the list
(positive entries first, then negative: the negative's come first in the batch); the outputs are
added in that order. A side of one whole entry is the plain network output, bit for bit.

Entries of different hook groups (:attr:`CondEntry.hooks`) never share a call: the entries are
split by group first, the groups in the order their first entry comes in the list (ComfyUI's
``hooked_to_run``), and each group is batched as above and called with its group, so a model
wrapper can give the network that group's LoRAs before the call (ComfyUI's ``apply_hooks``).
ComfyUI keys the groups by the hook objects; Loadout by the labels, so two entries with equal
labels batch where ComfyUI's two copies of one group might not (the same result, up to rounding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from core.errors import LoadoutError
from core.sampling.cond_entry import CondEntry, LatentArea
from core.sampling.conditioning import Conditioning, can_concat, concat
from core.sampling.denoiser import Denoiser

#: ComfyUI's feathering width at an area's inner edges, in latent cells
FEATHER = 8
#: what ComfyUI starts every weight sum at (a cell no entry covers stays 0)
EMPTY_COUNT = 1e-37


@dataclass(frozen=True)
class Weighed:
    """One entry at one sigma: its part of the latent, its weight there, where it sits."""

    x: Tensor
    mult: Tensor
    cond: Conditioning
    area: LatentArea | None
    hooks: frozenset[str] = frozenset()


def weigh(entry: CondEntry, cond: Conditioning, x: Tensor, sigma: Tensor) -> Weighed | None:
    """ComfyUI's ``get_area_and_mult``: None where the entry does not act at ``sigma[0]``."""
    if not entry.acts_at(sigma[0]):
        return None
    area, part = entry.area, x
    if area is not None:
        h, w = x.shape[-2], x.shape[-1]
        area = LatentArea(min(h - area.y, area.height), min(w - area.x, area.width), area.y, area.x)
        if area.height < 1 or area.width < 1:
            raise LoadoutError(
                "a region lies outside the latent",
                why=f"rows {area.y}.. and columns {area.x}.. of a {h}x{w} latent",
                fix="Give regions inside the picture",
                code="bad_argument",
            )
        part = x[..., area.y : area.y + area.height, area.x : area.x + area.width]
    if entry.mask is not None:
        mask = entry.mask[: part.shape[0]]
        if area is not None:
            mask = mask[..., area.y : area.y + area.height, area.x : area.x + area.width]
        mask = mask.to(part) * entry.mask_strength
        mask = mask.unsqueeze(1).repeat(part.shape[0] // mask.shape[0], part.shape[1], 1, 1)
    else:
        mask = torch.ones_like(part)
    mult = mask * entry.strength
    if entry.mask is None and area is not None:
        _feather(mult, area, x.shape[-2], x.shape[-1])
    return Weighed(part, mult, cond, area, entry.hooks)


def _feather(mult: Tensor, area: LatentArea, height: int, width: int) -> None:
    """The ramps at the area's inner edges, in place (rows, then columns)."""
    for dim, size, start, full in ((-2, area.height, area.y, height), (-1, area.width, area.x, width)):
        r = min(FEATHER, mult.shape[dim] // 4)
        for t in range(r):
            if start != 0:
                mult.narrow(dim, t, 1).mul_((1.0 / r) * (t + 1))
        for t in range(r):
            if start + size < full:
                mult.narrow(dim, size - 1 - t, 1).mul_((1.0 / r) * (t + 1))


def calc_cond_batch(
    denoiser: Denoiser,
    sides: Sequence[tuple[Conditioning, Sequence[CondEntry]] | None],
    x: Tensor,
    sigma: Tensor,
) -> list[Tensor]:
    """Each side's estimate of the clean latent (zeros for a side that is None). A side is its base
    conditioning (for entries whose ``cond`` is None) and its entries."""
    outs = [torch.zeros_like(x) for _ in sides]
    counts = [torch.ones_like(x) * EMPTY_COUNT for _ in sides]
    batch = x.shape[0]
    groups: dict[frozenset[str], list[tuple[Weighed, int]]] = {}
    for i, side in enumerate(sides):
        if side is None:
            continue
        base, entries = side
        for entry in entries:
            cond = (base if entry.cond is None else entry.cond).repeat_to(batch)
            weighed = weigh(entry, cond, x, sigma)
            if weighed is not None:
                groups.setdefault(weighed.hooks, []).append((weighed, i))
    for hooks, to_run in groups.items():
        _run_group(denoiser, hooks, to_run, outs, counts, sigma)
    for out, count in zip(outs, counts, strict=True):
        out /= count
    return outs


def _run_group(
    denoiser: Denoiser,
    hooks: frozenset[str],
    to_run: list[tuple[Weighed, int]],
    outs: list[Tensor],
    counts: list[Tensor],
    sigma: Tensor,
) -> None:
    """One hook group's entries, batched as the module notes say, added to their sides' sums."""
    while to_run:
        first = to_run[0][0]
        group = [j for j, (w, _) in enumerate(to_run) if _batchable(w, first)][::-1]
        chosen = [to_run[j] for j in group]
        for j in group:  # descending, so every index stays valid
            to_run.pop(j)
        xs = torch.cat([w.x for w, _ in chosen])
        sigmas = torch.cat([sigma] * len(chosen))
        output = denoiser(xs, sigmas, concat([w.cond for w, _ in chosen]), hooks).chunk(len(chosen))
        for (w, side_index), out in zip(chosen, output, strict=True):
            target, count = outs[side_index], counts[side_index]
            if w.area is not None:
                a = w.area
                target = target[..., a.y : a.y + a.height, a.x : a.x + a.width]
                count = count[..., a.y : a.y + a.height, a.x : a.x + a.width]
            target += out * w.mult
            count += w.mult


def _batchable(a: Weighed, b: Weighed) -> bool:
    return a is b or (a.x.shape == b.x.shape and can_concat(a.cond, b.cond))
