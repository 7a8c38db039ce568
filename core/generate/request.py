"""What a picture is made from: the typed request of ``loadout generate`` and the window's Generate."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from core.detect.prediction import PREDICTIONS
from core.errors import LoadoutError
from core.generate.hires_settings import HiresFix
from core.generate.outpaint_settings import Outpaint
from core.generate.workflow_request import (
    ControlNetUse,
    ControlPictureUse,
    IpAdapterUse,
    ReduxUse,
    RefinerUse,
)
from core.guidance import GuidancePatch, default_patches
from core.patching.merge import LoraArg
from core.patching.schedule import LoraSchedule
from core.regions import Region
from core.values import BATCH, CFG, CLIP_SKIP, DENOISE, GUIDANCE, SEED, STEPS, NumberRange, check_size

#: The largest seed ComfyUI's seed widget allows (0xffffffffffffffff).
MAX_SEED = int(SEED.hi)
#: the most reference pictures any family takes (FLUX.2's ten; each family's own limit is its record's)
MAX_REFERENCES = 10


@dataclass(frozen=True)
class ModelFiles:
    """Where the networks come from: an all-in-one checkpoint and/or separate component files
    (ComfyUI's UNETLoader / DualCLIPLoader / VAELoader). A separate file replaces the checkpoint's
    component of the same role."""

    checkpoint: Path | None = None
    diffusion_model: Path | None = None
    text_encoders: tuple[Path, ...] = ()
    vae: Path | None = None

    def __post_init__(self) -> None:
        if self.checkpoint is None and self.diffusion_model is None:
            raise LoadoutError(
                "nothing to generate with",
                why="neither a checkpoint nor a diffusion model was given",
                fix="Give a checkpoint, or a diffusion model with its text encoders and VAE",
                code="bad_argument",
            )

    @property
    def paths(self) -> tuple[Path, ...]:
        found = [self.checkpoint, self.diffusion_model, *self.text_encoders, self.vae]
        return tuple(p for p in found if p is not None)


@dataclass(frozen=True)
class Sampling:
    """KSampler's widgets, with ComfyUI's names and meanings."""

    seed: int = 0
    steps: int = 20
    cfg: float | None = None  # None: the family's usual value (its record's defaults)
    sampler: str = "euler"
    scheduler: str = "normal"
    denoise: float = 1.0
    guidance: float | None = None  # Flux-dev's distilled guidance (FluxGuidance; ComfyUI default 3.5)

    def problems(self) -> list[str]:
        """Each value outside its range (:mod:`core.values`), said with the range."""
        checks: list[tuple[NumberRange, object]] = [
            (SEED, self.seed), (STEPS, self.steps), (DENOISE, self.denoise),
            *([(CFG, self.cfg)] if self.cfg is not None else []),
            *([(GUIDANCE, self.guidance)] if self.guidance is not None else []),
        ]  # fmt: skip
        return [f"{why}: {r.name} must be {r.describe()}" for r, v in checks if (why := r.problem(v))]


@dataclass(frozen=True)
class ImageSettings:
    """What the Generate panel holds: the prompt and KSampler's settings, with no files."""

    prompt: str
    negative: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    width: int = 512
    height: int = 512
    batch: int = 1
    init_image: Path | None = None  # img2img: the picture to start from (sampling.denoise < 1)
    hires: HiresFix | None = None  # a second pass at a larger size (core.generate.hires)
    controlnets: tuple[ControlNetUse, ...] = ()  # applied in order (core/generate/controlnet.py)
    #: the control picture a FLUX.1 Canny/Depth model or control LoRA reads (core/generate/control_picture.py)
    control_picture: ControlPictureUse | None = None
    #: model files the ControlNets' model preprocessors (depth) use, one per family; a family not
    #: given is looked for in the library (core/preprocess/placed.py)
    preprocessor_models: tuple[Path, ...] = ()
    mask_image: Path | None = None  # inpainting: white = repaint (with init_image)
    outpaint: Outpaint | None = None  # outpainting: init_image grown on its sides (core.generate.outpaint)
    refiner: RefinerUse | None = None  # the SDXL refiner hand-off (core/generate/refiner.py)
    #: A1111's clip skip (1 last layer, 2 penultimate: ComfyUI's CLIPSetLastLayer -N on every CLIP
    #: tower); None: the family's own layer (SD1 last, SD2/SDXL penultimate)
    clip_skip: int | None = None
    #: guidance patches (PAG, FreeU ...: core/guidance), applied in order to the base model
    guidance_patches: tuple[GuidancePatch, ...] = ()
    #: LoRA strengths over the steps, by the LoRA's name in the stack (core/patching/schedule.py)
    lora_schedules: tuple[LoraSchedule, ...] = ()
    #: editing: reference pictures (FLUX.1 Kontext, FLUX.2, Qwen-Image-Edit: core/generate/references.py),
    #: at most as many as the model's family takes
    references: tuple[Path, ...] = ()
    #: editing: each reference picture encoded at its own size (cropped to the VAE's multiple)
    #: rather than scaled by the family's rule to about a megapixel (ComfyUI's edit templates
    #: without their scale node)
    reference_own_size: bool = False
    #: parts of the picture drawn from their own prompts (core/regions), beside the prompt
    regions: tuple[Region, ...] = ()
    #: image prompts (IP-Adapter on SD1.5/SDXL: core/generate/ip_adapter.py), applied in order
    ip_adapters: tuple[IpAdapterUse, ...] = ()
    #: image prompts by FLUX Redux, appended to the prompt in order (core/generate/redux.py)
    redux: tuple[ReduxUse, ...] = ()
    #: the image encoder (a vision tower file) the image prompts read their pictures with (None:
    #: the one of the family they need, found in the library or beside their files)
    image_encoder: Path | None = None
    #: the folder of InsightFace's face models FaceID IP-Adapters read faces with (buffalo_l's
    #: det_10g.onnx and w600k_r50.onnx; None: found in ComfyUI's models/insightface)
    insightface: Path | None = None

    def __post_init__(self) -> None:
        problems = self.sampling.problems()
        try:
            check_size(self.width, self.height)
        except LoadoutError as exc:
            problems.append(exc.what)
        if (why := BATCH.problem(self.batch)) is not None:
            problems.append(f"{why}: {BATCH.name} must be {BATCH.describe()}")
        if self.clip_skip is not None and (why := CLIP_SKIP.problem(self.clip_skip)) is not None:
            problems.append(f"{why}: {CLIP_SKIP.name} must be {CLIP_SKIP.describe()}")
        if self.init_image is None and self.sampling.denoise < 1.0:
            problems.append("denoise below 1 needs a starting image")
        if self.hires is not None:
            problems += self.hires.problems()
            w, h = self.final_size
            if w * h > 4096 * 4096 or w < 64 or h < 64:
                problems.append(f"the hires fix's size {w}x{h} must be between 64x64 and 4096x4096 in area")
        boxes = [r.box for r in self.regions if r.box is not None]
        problems += [why for b in boxes if (why := b.problem_in(self.width, self.height))]
        if self.mask_image is not None and self.init_image is None:
            problems.append("a mask needs the picture it masks (a starting image)")
        if self.outpaint is not None:
            problems += self.outpaint.problems()
            if self.init_image is None:
                problems.append("outpainting needs the picture it grows (a starting image)")
            if self.mask_image is not None:
                problems.append("outpainting makes its own mask: give a mask or sides to grow, not both")
        if len(self.references) > MAX_REFERENCES:
            many = len(self.references)
            problems.append(f"{many} reference pictures: no family takes more than {MAX_REFERENCES}")
        if problems:
            raise LoadoutError(
                "these generation settings cannot be used",
                why="; ".join(problems),
                fix="Change the settings named above",
                code="bad_argument",
            )

    @property
    def mapped_files(self) -> tuple[Path, ...]:
        """The model files this generation maps beyond the loaded ones: its ControlNets and their
        preprocessors' models, its image prompts' IP-Adapters, style models and image encoder, the
        hires fix's upscale model and the refiner (the hint, init, mask, reference and image-prompt
        pictures are read, not mapped)."""
        paths = [use.path for use in self.controlnets] + list(self.preprocessor_models)
        paths += dict.fromkeys([*(u.path for u in self.ip_adapters), *(u.path for u in self.redux)])
        if (self.ip_adapters or self.redux) and self.image_encoder is not None:
            paths.append(self.image_encoder)
        if self.hires is not None and self.hires.model is not None:
            paths.append(self.hires.model)
        if self.refiner is not None:
            paths.append(self.refiner.path)
        return tuple(paths)

    @property
    def final_size(self) -> tuple[int, int]:
        """(width, height) of the pictures made: after the hires fix when there is one."""
        if self.hires is None:
            return self.width, self.height
        return self.hires.target_size(self.width, self.height)


@dataclass(frozen=True)
class GenerateRequest:
    models: ModelFiles
    image: ImageSettings
    loras: tuple[LoraArg, ...] = ()
    output: Path = Path("loadout.png")  # a file (batch: name-2.png, ...) or, with output_is_folder, a folder
    output_is_folder: bool = False
    device: str = "cpu"
    dtype: torch.dtype | None = None  # compute dtype of the diffusion model; None: the policy decides
    vram_limit: int | None = None
    #: refuse a LoRA of which some modules fit nothing in the model (default: apply what fits, say so)
    strict: bool = False
    #: apply a LoRA made for another model family anyway (what fits of it)
    force: bool = False
    #: the sampling settings the caller left to the model's family ("steps", "sampler",
    #: "scheduler"): taken from its record's usual values once the model is known (Z-Image Turbo:
    #: 8 steps, res_multistep, simple), the ``image``'s own where the record has none
    family_defaults: tuple[str, ...] = ()
    #: folders searched first for the prompts' textual-inversion embeddings (then the installs'
    #: embeddings folders beside the model files)
    embeddings: tuple[Path, ...] = ()
    #: what the model predicts ("eps", "v", "v-ztsnr"), over what its file says (None: the file's)
    prediction: str | None = None

    def __post_init__(self) -> None:
        if self.prediction is not None and self.prediction not in PREDICTIONS:
            raise LoadoutError(
                f"{self.prediction!r} is not a prediction type",
                fix=f"Give one of {', '.join(PREDICTIONS)}",
                code="bad_argument",
            )


#: the :class:`Sampling` fields a family's record may give (``GenerationDefaults``' names)
FAMILY_SAMPLING: frozenset[str] = frozenset({"steps", "sampler", "scheduler"})
#: the name of the family's default guidance patches among the settings a request leaves to it
FAMILY_PATCHES = "patches"


def with_family_defaults(image: ImageSettings, defaults: object, names: Iterable[str]) -> ImageSettings:
    """``image`` with each of ``names`` taken from ``defaults`` (a family's ``GenerationDefaults``)
    where it has a value; ``patches``: the family's guidance patches at their defaults."""
    names = frozenset(names)
    bad = names - FAMILY_SAMPLING - {FAMILY_PATCHES}
    if bad:
        raise ValueError(f"not a family sampling setting: {sorted(bad)}")
    changes = {n: v for n in sorted(names & FAMILY_SAMPLING) if (v := getattr(defaults, n, None)) is not None}
    out = replace(image, sampling=replace(image.sampling, **changes)) if changes else image
    patches = getattr(defaults, FAMILY_PATCHES, ())
    if FAMILY_PATCHES in names and patches:
        out = replace(out, guidance_patches=default_patches(patches))
    return out
