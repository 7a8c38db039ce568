"""Classifier-free guidance with the negative and positive prompt in one forward pass.

ComfyUI's ``sampling_function``: with a CFG scale of 1 (``math.isclose``) the negative prompt is
not evaluated at all; otherwise both run as one batch, negative items first, and
``denoised = uncond + (cond - uncond) * scale``. The CFG++ samplers also take the negative's own
estimate (:meth:`CfgDenoiser.with_uncond`), for which the negative runs even at CFG 1.
Conditionings that cannot be concatenated (see :mod:`core.sampling.conditioning`) run as two
passes with the same result. Each prompt is a conditioning list (its own conditioning, then the
run's regions for it) weighed as ComfyUI's ``calc_cond_batch`` (:mod:`core.sampling.cond_batch`).

The run's CFG stages (:mod:`core.sampling.patches`) change the combination as ComfyUI's
``cfg_function`` does: pre-CFG functions in order, then the one guidance function (or plain CFG),
then post-CFG functions in order. Where the negative was not run, its estimate is zeros for them
(ComfyUI's empty ``calc_cond_batch`` output).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

import torch
from torch import Tensor

from core.errors import LoadoutError
from core.models.patches import NetworkPatches
from core.sampling.cond_batch import calc_cond_batch
from core.sampling.cond_entry import CondEntry, with_area_copies
from core.sampling.conditioning import Conditioning
from core.sampling.denoiser import Denoiser
from core.sampling.patches import NO_MODEL_PATCHES, CfgCall, ModelPatches, Predict

#: a prompt's own entry: its conditioning on the whole latent
WHOLE = CondEntry(None)


@dataclass(frozen=True)
class CfgDenoiser:
    """What a sampler calls: ``(x, sigma [B]) -> guided denoised latent``."""

    denoiser: Denoiser
    positive: Conditioning
    negative: Conditioning | None
    scale: float
    #: the run's patches, of which the CFG stages (pre-CFG, guidance, post-CFG) are used here
    stages: ModelPatches = NO_MODEL_PATCHES
    #: the denoiser with more network patches (post-CFG functions that run the network again)
    patched: Callable[[NetworkPatches], Denoiser] | None = None

    @property
    def uses_negative(self) -> bool:
        return self.negative is not None and not math.isclose(self.scale, 1.0)

    def __call__(self, x: Tensor, sigma: Tensor) -> Tensor:
        if self.negative is None or not self.uses_negative:
            cond = self.estimates(self.denoiser, x, sigma, negative=False)[0]
            if not self.stages.changes_cfg:
                return cond
            return self.combine(x, sigma, cond, torch.zeros_like(cond))
        return self.with_uncond(x, sigma)[0]

    def with_uncond(self, x: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor]:
        """``(guided, uncond)`` with the negative evaluated whatever the scale (the CFG++
        samplers' path; at CFG 1 the guided result is ``uncond + (cond - uncond)``, as ComfyUI
        computes it). Without a negative prompt the positive's estimate is both."""
        if self.negative is None:
            cond = self.estimates(self.denoiser, x, sigma, negative=False)[0]
            if not self.stages.changes_cfg:
                return cond, cond
            return self.combine(x, sigma, cond, torch.zeros_like(cond)), cond
        cond, uncond = self.estimates(self.denoiser, x, sigma, negative=True)
        return self.combine(x, sigma, cond, uncond), uncond

    def side(self, negative: bool) -> tuple[Conditioning, tuple[CondEntry, ...]] | None:
        """One prompt's conditioning list: its own conditioning on the whole latent, then the
        run's entries for that side (regions), then the copies of the other side's areas, each
        with its hook group."""
        base = self.negative if negative else self.positive
        if base is None:
            return None
        return base, self._lists[1 if negative else 0]

    @cached_property
    def _lists(self) -> tuple[tuple[CondEntry, ...], tuple[CondEntry, ...]]:
        """Both lists, made once per sampling as ComfyUI's ``process_conds``: a side's hooks on its
        own entries (with their own labels some LoRA acts on), then each area copied to the other
        side (the copy keeps the hooks of the entry it copies, as ComfyUI's ``c.copy()``)."""
        s = self.stages
        negative = s.negative_conds if self.negative is not None else ()
        if not (s.positive_hooks or s.negative_hooks or s.positive_conds or negative):
            return (WHOLE,), (WHOLE,)
        lists = [
            [CondEntry(None, hooks=hooks)]
            + [replace(e, hooks=(e.hooks & s.hook_labels) | hooks) for e in more]
            for more, hooks in ((s.positive_conds, s.positive_hooks), (negative, s.negative_hooks))
        ]
        return with_area_copies(*lists)

    def estimates(self, denoiser: Denoiser, x: Tensor, sigma: Tensor, *, negative: bool) -> list[Tensor]:
        """The positive's estimate (and the negative's, with ``negative``), as ComfyUI's
        ``calc_cond_batch``: one forward pass where the conditionings concatenate."""
        sides = [self.side(False), self.side(True)] if negative else [self.side(False)]
        return calc_cond_batch(denoiser, sides, x, sigma)

    def combine(self, x: Tensor, sigma: Tensor, cond: Tensor, uncond: Tensor) -> Tensor:
        """The two estimates through the pre-CFG functions, the guidance (or plain CFG) and the
        post-CFG functions, in order."""
        stages = self.stages
        call = CfgCall(x, sigma, cond, uncond, self.scale, self._predictor(x, sigma))
        for pre in stages.pre_cfg:
            call = pre(call)
        out = call.cfg() if stages.guidance is None else stages.guidance(call)
        for post in stages.post_cfg:
            out = post(call, out)
        return out

    def _predictor(self, latent: Tensor, sigma: Tensor) -> Predict:
        def predict(
            patches: NetworkPatches, *, x: Tensor | None = None, negative: bool = False
        ) -> Tensor | None:
            cond = self.negative if negative else self.positive
            if cond is None:
                return None
            if self.patched is None:
                raise LoadoutError(
                    "this guidance feature needs the network run once more, which this sampler cannot",
                    why="the denoiser was given without a way to add network patches",
                    fix="Leave the feature out for this run",
                    code="bad_argument",
                )
            at = latent if x is None else x
            side = self.side(negative)
            return calc_cond_batch(self.patched(patches), [side], at, sigma)[0]

        return predict
