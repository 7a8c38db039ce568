"""Regional prompting as a pass (:mod:`core.regions`): each region's prompt is encoded as the
positive prompt is (the family's text convention, clip skip, embeddings, the stage's size
conditioning; the text-encoder part of a LoRA put on the region or on its side:
:func:`region_labels`), resolved for the latent of every stage the base model samples, and handed to the
sampler as more entries of the positive prompt's conditioning list -- a negative region's of the
negative's -- (ComfyUI: CLIPTextEncode -> ConditioningSetArea / SetMask / SetTimestepRange ->
ConditioningCombine with the prompt, into every base KSampler); the sampler copies each area to
the other prompt's list (:func:`core.sampling.cond_entry.with_area_copies`). Pixel boxes refer to the first
pass's size and scale with a larger stage (the hires fix's second pass); mask pictures are read
once, when the plan is made. The refiner, a model with its own text encoders, gets no regions."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from core.errors import LoadoutError
from core.generate.passes import Contribution, Plan, Run
from core.generate.pictures import read_mask
from core.generate.request import ImageSettings
from core.patching.prompt_target import region_label
from core.regions import Region, region_entry
from core.sampling.cond_entry import CondEntry
from core.sampling.patches import ModelPatches


def region_labels(index: int, region: Region) -> frozenset[str]:
    """The hook labels of region ``index``'s conditioning: its own and its side's (which LoRAs'
    text-encoder parts its prompt is encoded with, :mod:`core.generate.clip_hooks`)."""
    return frozenset({region_label(index), "negative" if region.negative else "positive"})


@dataclass(frozen=True)
class RegionPatches:
    """The regions' entries for one stage (a :class:`core.generate.passes.StagePatches`)."""

    regions: tuple[Region, ...]
    masks: dict[Path, Tensor]

    def __call__(self, settings: ImageSettings, latent: tuple[int, int], run: Run) -> ModelPatches:
        pipe, picture = run.pipeline, (run.settings.width, run.settings.height)
        t0 = time.perf_counter()
        entries: list[CondEntry] = []
        prompts = [(r.prompt, region_labels(i, r), False) for i, r in enumerate(self.regions)]
        encoded = pipe.encode_many(prompts, settings, run.hooks)
        for region, (cond, missing) in zip(self.regions, encoded, strict=True):
            run.missing += missing
            mask = None if region.mask is None else self.masks[region.mask]
            entry = region_entry(region, cond, mask, picture, latent, pipe.sampling)
            entries.append(replace(entry, hooks=frozenset({region_label(len(entries))})))
        run.timings.text_encode += time.perf_counter() - t0
        if run.patches.extra_inputs and any(e.area is not None for e in entries):
            raise LoadoutError(
                "a region with a box cannot be used with this inpainting model",
                why="the model's extra input channels are made for the whole picture",
                fix="Use a mask without mask bounds for the region, or a regular checkpoint",
                code="bad_argument",
            )
        pairs = list(zip(self.regions, entries, strict=True))
        return ModelPatches(
            positive_conds=tuple(e for r, e in pairs if not r.negative),
            negative_conds=tuple(e for r, e in pairs if r.negative),
        )


@dataclass
class RegionsPass:
    regions: tuple[Region, ...]
    kind: str = "regions"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        paths = dict.fromkeys(r.mask for r in self.regions if r.mask is not None)
        masks = {p: torch.from_numpy(read_mask(p)) for p in paths}
        plan.stage_patches.append(RegionPatches(self.regions, masks))
