"""The SDXL refiner hand-off as ComfyUI's two KSamplerAdvanced nodes.

One schedule of ``steps`` sigmas (scheduler, sampler and denoise as the KSampler's) is cut at the
switch step ``round(steps * switch)``:

* the base model runs from step 0 to the switch step with noise added and the leftover noise
  returned (``return_with_leftover_noise``: the last sigma is not forced to 0);
* the refiner runs from the switch step to the end on that latent with ``add_noise`` disabled
  (zero noise), with its own conditioning: CLIP-G only, and the aesthetic score 6 / 2.5 of
  ComfyUI's CLIPTextEncodeSDXLRefiner beside the size (``core.text.conditioning.sdxl_refiner_adm``);
* the base's VAE decodes.

After a hires fix the cut is in the hires pass's schedule (its steps and denoise), so the refiner
finishes the larger picture. The refiner checkpoint is loaded once per session and its parts are
placed by the memory manager for their own phases ("refine_encode", "refine"), so base and refiner
swap through the card.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.detect.catalog import REFINER_FAMILY
from core.errors import ModelMismatchError
from core.generate.passes import Contribution, KSample, Plan
from core.generate.pipeline import Hooks, Networks, Pipeline
from core.generate.request import ImageSettings
from core.generate.workflow_request import RefinerUse
from core.loading.loader import LoadOptions, ModelBundle, load_checkpoint
from core.sampling import ksampler_sigmas
from core.text.conditioning import text_encoders


@dataclass
class LoadedRefiner:
    path: Path
    bundle: ModelBundle
    generation: int = 0  # its load in the session (the conditioning cache's key for its CLIP-G)

    @property
    def objects(self) -> list[object]:
        return [c.module for c in self.bundle.components]


def load_refiner(path: Path, check: Callable[[], None] | None = None, generation: int = 0) -> LoadedRefiner:
    bundle = load_checkpoint(path, LoadOptions(check=check))
    d = bundle.diffusion_model
    if d is None or d.family != REFINER_FAMILY or not bundle.text_encoders:
        what = d.family if d is not None else "no diffusion model"
        raise ModelMismatchError(
            f"{Path(path).name} is not an SDXL refiner checkpoint ({what})",
            why="the refiner hand-off needs the SDXL refiner with its CLIP-G text encoder",
            fix="Give sd_xl_refiner_1.0.safetensors (or another sdxl-refiner checkpoint) as the refiner",
            code="wrong_kind",
        )
    return LoadedRefiner(Path(path), bundle, generation)


def refiner_networks(refiner: LoadedRefiner, base: Networks) -> Networks:
    d = refiner.bundle.diffusion_model
    assert d is not None
    text = text_encoders([(c.family, c.module) for c in refiner.bundle.text_encoders])
    return Networks(REFINER_FAMILY, d.module, text, base.vae)


@dataclass
class RefinerPass:
    """The last KSampler stage of the plan (the first pass, or the hires pass after a hires fix, as
    A1111's default "second pass") cut at the switch step: the base model's KSamplerAdvanced up to
    it, returning the leftover noise, then the refiner's from it with no noise added. The noise mask
    goes on to the refiner with the latent."""

    refiner: Pipeline
    hooks: Hooks  # the refiner's placement (:func:`refiner_hooks`)
    use: RefinerUse
    kind: str = "refiner"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        at = plan.last_sampler()
        last = plan.stages[at]
        assert isinstance(last, KSample)
        s = last.sampling
        size = last.size or (settings.width, settings.height)  # for the schedules that take it
        sigmas = ksampler_sigmas(plan.pipeline.sampling, s.scheduler, s.sampler, s.steps, s.denoise, size)
        switch = self.use.switch_step(s.steps)
        base = replace(last, sigmas=sigmas[: switch + 1])
        refine = replace(
            last, pipeline=self.refiner, hooks=self.hooks, sigmas=sigmas[switch:], add_noise=False
        )
        plan.stages[at : at + 1] = [base, refine]


def refiner_hooks(hooks: Hooks, place: Callable[[str], None], text_key: object) -> Hooks:
    """The base's hooks with the refiner's placement: its text encoder for the prompt, its UNet
    for the steps after the switch (the VAE is the base's)."""

    def where(phase: str) -> None:
        if phase == "text_encode":
            place("refine_encode")
        elif phase == "sample":
            place("refine")
        else:
            hooks.place(phase)  # type: ignore[arg-type]

    return replace(hooks, place=where, text_key=text_key, clip_hooks=None)  # no base LoRA on its encoders
