"""The sigmas a KSampler run walks, from scheduler, steps, sampler and denoise (ComfyUI's
``KSampler.calculate_sigmas`` / ``set_steps``).

- Samplers that discard the penultimate sigma get ``steps + 1`` sigmas computed and the one
  before the final 0 removed.
- A partial denoise (img2img) computes ``int(steps / denoise)`` steps and keeps the last
  ``steps + 1`` sigmas, so the run starts part-way down the full schedule with ``steps`` steps.
  A denoise above 0.9999 counts as full; a denoise of 0 gives no sigmas (nothing to do).
"""

from __future__ import annotations

import torch
from torch import Tensor

from core.errors import LoadoutError
from core.sampling.model_sampling import ModelSampling
from core.sampling.samplers import get_sampler
from core.sampling.schedulers import SCHEDULERS
from core.sampling.sized_schedules import SIZED


def scheduler_sigmas(
    ms: ModelSampling, scheduler: str, steps: int, size: tuple[int, int] | None = None
) -> Tensor:
    """``size``: the picture's (width, height), which the sized schedules need."""
    sized = SIZED.get(scheduler)
    if sized is not None and size is not None:
        return sized(steps, *size)
    fn = SCHEDULERS.get(scheduler)
    if fn is None:
        raise LoadoutError(
            f"unknown scheduler {scheduler!r}",
            why="schedulers are named as in ComfyUI's KSampler",
            fix="use one of: " + ", ".join(SCHEDULERS),
            code="bad_argument",
        )
    return fn(ms, steps)


def _full(
    ms: ModelSampling, scheduler: str, sampler: str, steps: int, size: tuple[int, int] | None
) -> Tensor:
    if get_sampler(sampler).discard_penultimate_sigma:
        sigmas = scheduler_sigmas(ms, scheduler, steps + 1, size)
        return torch.cat([sigmas[:-2], sigmas[-1:]])
    return scheduler_sigmas(ms, scheduler, steps, size)


def ksampler_sigmas(
    ms: ModelSampling,
    scheduler: str,
    sampler: str,
    steps: int,
    denoise: float = 1.0,
    size: tuple[int, int] | None = None,
) -> Tensor:
    """``size``: the picture's (width, height) in pixels, for the schedules that need it."""
    if steps < 1:
        raise LoadoutError(
            f"{steps} steps were asked for",
            why="a run needs at least one step",
            fix="set steps to 1 or more",
            code="bad_argument",
        )
    if not 0.0 <= denoise <= 1.0:
        raise LoadoutError(
            f"the denoise strength {denoise} is out of range",
            why="denoise is the fraction of the schedule to run, from 0 to 1",
            fix="set denoise between 0 and 1 (1 for text-to-image)",
            code="bad_argument",
        )
    if denoise > 0.9999:
        return _full(ms, scheduler, sampler, steps, size)
    if denoise <= 0.0:
        return torch.zeros(0, dtype=torch.float32)
    return _full(ms, scheduler, sampler, int(steps / denoise), size)[-(steps + 1) :]
