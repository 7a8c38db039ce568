"""The SDXL refiner hand-off as ComfyUI's two KSamplerAdvanced nodes.

One schedule of ``steps`` sigmas (scheduler, sampler and denoise as the KSampler's) is cut at the
switch step ``round(steps * switch)``:

* the base model runs from step 0 to the switch step with noise added and the leftover noise
  returned (``return_with_leftover_noise``: the last sigma is not forced to 0);
* the refiner runs from the switch step to the end on that latent with ``add_noise`` disabled
  (zero noise), with its own conditioning: CLIP-G only, and the aesthetic score 6 / 2.5 of
  ComfyUI's CLIPTextEncodeSDXLRefiner beside the size (``core.text.conditioning.sdxl_refiner_adm``);
* the base's VAE decodes.

The refiner checkpoint is loaded once per session and its parts are placed by the memory manager
for their own phases ("refine_encode", "refine"), so base and refiner swap through the card.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from torch import Tensor

from core.detect.catalog import REFINER_FAMILY
from core.errors import ModelMismatchError
from core.generate.pipeline import Hooks, Networks, Pipeline, Timings, text_encoders
from core.generate.request import ImageSettings
from core.loading.loader import LoadOptions, ModelBundle, load_checkpoint
from core.sampling import ksampler_sigmas

#: base families a refiner follows
BASES = ("sdxl",)


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
            fix="Give sd_xl_refiner_1.0.safetensors (or another sdxl-refiner checkpoint) to --refiner",
            code="wrong_kind",
        )
    return LoadedRefiner(Path(path), bundle, generation)


def refiner_networks(refiner: LoadedRefiner, base: Networks) -> Networks:
    d = refiner.bundle.diffusion_model
    assert d is not None
    text = text_encoders([(c.family, c.module) for c in refiner.bundle.text_encoders])
    return Networks(REFINER_FAMILY, d.module, text, base.vae)


def run_refined(
    base: Pipeline,
    refiner: Pipeline,
    settings: ImageSettings,
    hooks: Hooks,
    refiner_hooks: Hooks,
    init: np.ndarray | None,
    switch_step: int,
) -> tuple[Tensor, Timings, tuple[str, ...]]:
    """Pipeline.run with the hand-off (see the module notes)."""
    timings = Timings()
    t0 = time.perf_counter()
    positive, negative, missing = base.encode_prompts(settings, hooks)
    r_positive, r_negative, r_missing = refiner.encode_prompts(settings, refiner_hooks)
    timings.text_encode = time.perf_counter() - t0
    init_latent = base.encode_image(init, hooks) if init is not None else None
    s = settings.sampling
    sigmas = ksampler_sigmas(base.sampling, s.scheduler, s.sampler, s.steps, s.denoise)
    t0 = time.perf_counter()
    base.sigmas = sigmas[: switch_step + 1]
    latent = base.sample(settings, positive, negative, hooks, timings, init_latent)
    refiner.sigmas, refiner.add_noise = sigmas[switch_step:], False
    latent = refiner.sample(settings, r_positive, r_negative, refiner_hooks, timings, latent)
    timings.sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    pixels = base.decode(latent, hooks, timings)
    timings.decode = time.perf_counter() - t0
    names = dict.fromkeys((*missing, *r_missing))
    notes = [f"embedding {name!r} was not found and was left out of the prompt" for name in names]
    if timings.tiled_decode:
        notes.append("the picture was decoded in tiles (the device had no room for a whole decode)")
    return pixels, timings, tuple(notes)


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

    return replace(hooks, place=where, text_key=text_key)
