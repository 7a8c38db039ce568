"""The hires fix: a second KSampler pass over the first pass's latent made larger, as this ComfyUI
graph computes it::

    KSampler (seed, steps, denoise 1) -> LatentUpscaleBy (method, scale)
        -> KSampler (the same seed, hires steps, denoise D) -> VAEDecode

or, with an upscale model file::

    KSampler -> VAEDecode -> ImageUpscaleWithModel -> ImageScaleBy (to the scale) -> VAEEncode
        -> KSampler (the same seed, hires steps, denoise D) -> VAEDecode

The second KSampler's sigmas are the last ``steps + 1`` of a ``int(steps / D)``-step schedule
(``core.sampling.sigmas``); its noise is drawn from the same seed at the larger shape. SDXL's size
conditioning takes the larger size, as ComfyUI's sampler takes it from the latent it samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from torch import Tensor

from core.generate.events import GenerateProgress
from core.generate.hires_settings import MODEL_RESIZE_METHOD, HiresFix
from core.generate.latent_upscale import resize, upscale_by
from core.generate.passes import Contribution, KSample, Latent, Plan, Run
from core.session.placement import Placement
from core.upscale.model import UpscaleModel, load_upscale_model
from core.upscale.placed import ROLE, manager_name, run_upscale

if TYPE_CHECKING:
    from core.generate.pipeline import Hooks, Pipeline, Timings
    from core.generate.request import ImageSettings


def upscale_latent_with_model(
    pipe: Pipeline, latent: Tensor, hires: HiresFix, hooks: Hooks, timings: Timings
) -> Tensor:
    """Decode, upscale with the model (``hooks.upscale``), resize to the target scale, encode."""
    if hooks.upscale is None:
        raise RuntimeError("an upscale model was asked for but the caller gave no way to run it")
    h, w, f = latent.shape[-2], latent.shape[-1], pipe.latent_format.downscale
    width, height = hires.target_size(w * f, h * f, f)
    pixels = pipe.decode(latent, hooks, timings)
    image = ((pixels + 1.0) / 2.0).clamp(0.0, 1.0)  # VAEDecode's [0, 1] picture
    hooks.progress(GenerateProgress("upscale", 0, 0, hires.label, None, hooks.image, hooks.images))
    hooks.place("upscale")
    big = hooks.upscale(image)
    if big.shape[-2:] != (height, width):
        big = resize(big, width, height, MODEL_RESIZE_METHOD)  # ImageScaleBy after a 4x model
    return pipe.encode_pixels(big * 2.0 - 1.0, hooks)


@dataclass(frozen=True)
class Upscale:
    """LatentUpscaleBy, or VAEDecode -> ImageUpscaleWithModel -> ImageScaleBy -> VAEEncode: the
    latent made larger. A noise mask goes along (LatentUpscaleBy copies the LATENT; after a model
    the new latent keeps it too, as a SetLatentNoiseMask after the VAEEncode would)."""

    hires: HiresFix

    def __call__(self, latent: Latent | None, run: Run) -> Latent:
        assert latent is not None  # the first pass sampled before
        hires, hooks, t0 = self.hires, run.hooks, time.perf_counter()
        if hires.model is None:
            hooks.progress(GenerateProgress("upscale", 0, 0, hires.label, None, hooks.image, hooks.images))
            hooks.place("upscale")
            big = upscale_by(latent.samples, hires.scale, hires.upscaler)
        else:
            big = upscale_latent_with_model(run.pipeline, latent.samples, hires, hooks, run.timings)
        run.timings.upscale = time.perf_counter() - t0
        return Latent(big, latent.noise_mask)


@dataclass
class HiresPass:
    """The hires fix: an upscale stage, then a KSampler with the same seed, the hires steps and
    denoise, at the larger size (see the module notes)."""

    hires: HiresFix
    kind: str = "hires"
    contribution: Contribution = field(default_factory=Contribution)

    def __post_init__(self) -> None:
        if self.hires.model is not None:  # the upscale model's file is kept mapped (the session's cache)
            self.contribution.files = (self.hires.model,)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        s = settings.sampling
        sampling = replace(s, steps=self.hires.steps or s.steps, denoise=self.hires.denoise)
        plan.stages += [Upscale(self.hires), KSample(sampling)]


def upscaler_hook(
    placement: Placement,
    models: dict[Path, UpscaleModel],
    path: Path,
    check: Callable[[], None],
    progress: Callable[[GenerateProgress], None],
    names: dict[str, str],
) -> Callable[[Tensor], Tensor]:
    """``Hooks.upscale`` for an upscale model file: read once per session (kept in ``models``),
    placed by the manager when it runs (its events tagged with the ``upscale_model`` role)."""
    model = models.get(path)
    if model is None:
        model = models[path] = load_upscale_model(path)
    names[manager_name(model)] = ROLE

    def tiles(done: int, total: int) -> None:
        progress(GenerateProgress("upscale", done, total, f"{model.name}, in tiles"))

    def run(pictures: Tensor) -> Tensor:
        return run_upscale(placement, model, pictures, check=check, progress=tiles)

    return run
