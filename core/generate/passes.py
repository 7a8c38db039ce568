"""Workflows as passes: one generation is a plan of stages, ComfyUI's graph as data, that each
workflow's pass adds to or changes before anything runs, then runs in order.

The passes, always in this order (:func:`ordered`):

0. **references** (editing): the reference pictures VAE-encoded before the prompts (a plan's
   ``prepare`` steps), their latents in every base sampler's conditioning
   (:mod:`core.generate.references`); then the **image prompts**: IP-Adapter's pictures encoded
   and projected before the prompts, their tokens in every base sampler's conditioning and their
   attention patch a model wrapper on every stage the base model samples
   (:mod:`core.generate.ip_adapter`); FLUX Redux's pictures encoded before the prompts, their
   tokens appended to every base sampler's positive prompt (:mod:`core.generate.redux`);
1. **start** (txt2img / img2img): Empty Latent Image or VAEEncode, then a KSampler stage;
2. **mask** (inpainting): SetLatentNoiseMask on the start latent (carried by every later stage, as
   ComfyUI's LATENT carries ``noise_mask``), and an inpainting model's extra input channels;
3. **ControlNets**: a model wrapper on every stage the base model samples (ControlNetApplyAdvanced
   changes the prompts' conditioning, which every base KSampler takes);
4. **guidance** patches (:mod:`core.guidance`): their model patches on every stage the base model
   samples, after the ControlNets' (ComfyUI applies the control before an output block patch);
5. **regions** (:mod:`core.regions`): the prompt's regions, encoded and resolved for each stage the
   base model samples at that stage's size (a :class:`StagePatches`);
6. **schedules**: LoRA strengths over the steps (:mod:`core.generate.lora_schedule`), a model
   wrapper on every stage the base model samples;
7. **hires** (latent or model upscale): an upscale stage and a second KSampler stage;
8. **refiner**: the last KSampler stage cut at the switch step into two KSamplerAdvanced stages,
   the base's (leftover noise returned) and the refiner's (no noise added).

Then the base's VAE decodes. A pass contributes its stages and the base model's patches here; the
models it places, the files it keeps and its PNG text are its :class:`Contribution` (the session's
side, :mod:`core.generate.workflows`). Each combination of passes is a valid plan; the ones that
cannot be made are refused by the pass that cannot follow, in words.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch
from torch import Tensor

from core.archs.conditioning import PromptBias
from core.archs.references import NO_PICTURES, PromptPictures
from core.errors import ModelMismatchError
from core.generate.request import ImageSettings, Sampling
from core.sampling.conditioning import Conditioning
from core.sampling.patches import NO_MODEL_PATCHES, ModelPatches

if TYPE_CHECKING:
    from core.generate.pipeline import Hooks, Pipeline, Timings


@dataclass(frozen=True)
class Latent:
    """ComfyUI's LATENT: ``samples`` in the VAE's space and SetLatentNoiseMask's ``noise_mask``
    (1 = repaint; any size: each sampler resizes it to its latent)."""

    samples: Tensor
    noise_mask: Tensor | None = None


@dataclass(frozen=True)
class References:
    """The reference pictures of an edit: their latents in the model's space (``[1, C, h, w]``
    each), the pictures as read for a prompt encoding that reads them, and whether the negative
    prompt's conditioning carries the latents too (the family's ComfyUI template)."""

    latents: tuple[Tensor, ...] = ()
    pictures: PromptPictures = NO_PICTURES
    negative: bool = True

    def attach(
        self, positive: Conditioning, negative: Conditioning | None
    ) -> tuple[Conditioning, Conditioning | None]:
        """ComfyUI's ReferenceLatent on the positive (and negative) conditioning."""
        if not self.latents:
            return positive, negative
        positive = replace(positive, references=positive.references + self.latents)
        if negative is not None and self.negative:
            negative = replace(negative, references=negative.references + self.latents)
        return positive, negative


NO_REFERENCES = References()


@dataclass(frozen=True)
class Appended:
    """Prompt tokens an image prompt appends (``[1, n, width]``) and the attention bias on their
    keys (ComfyUI's StyleModelApply "attn_bias": :class:`core.archs.conditioning.PromptBias`;
    None: no bias)."""

    tokens: Tensor
    bias: float | None = None


def append_tokens(cond: Conditioning, blocks: Sequence[Tensor | Appended]) -> Conditioning:
    """ComfyUI's ``StyleModelApply``: each ``[1, n, width]`` block of tokens appended, in order, to
    the prompt's context (every item of its batch; the mask, where there is one, says they are
    real), a block's attention bias as a span of the conditioning's."""
    ctx = cond.context
    made = [b if isinstance(b, Appended) else Appended(b) for b in blocks]
    wrong = next((b.tokens for b in made if b.tokens.shape[-1] != ctx.shape[-1]), None)
    if wrong is not None:
        raise ModelMismatchError(
            f"the image prompt's tokens are {wrong.shape[-1]} wide, and this model's prompt tokens "
            f"{ctx.shape[-1]}",
            why="image prompt tokens are appended to the prompt's own",
            fix="Use a style model made for this model's family",
            code="wrong_kind",
        )
    extra = [b.tokens.to(device=ctx.device, dtype=ctx.dtype).expand(ctx.shape[0], -1, -1) for b in made]
    spans, start = list(cond.attention_bias), ctx.shape[1]
    for b in made:
        if b.bias is not None:
            spans.append(PromptBias(start, b.tokens.shape[1], b.bias))
        start += b.tokens.shape[1]
    mask = cond.mask
    if mask is not None:
        n = sum(b.tokens.shape[1] for b in made)
        mask = torch.cat((mask, mask.new_ones((mask.shape[0], n))), dim=1)
    context = torch.cat((ctx, *extra), dim=1)
    return replace(cond, context=context, mask=mask, attention_bias=tuple(spans))


@dataclass(frozen=True)
class ImagePrompts:
    """The image prompts' tokens, filled by their passes before the prompts are encoded:

    * ``positive`` / ``negative`` (IP-Adapter's projected pictures, one ``[1, tokens, width]`` per
      adapter in order): the positive prompt's conditioning carries the pictures', the negative's
      the empty picture's (ComfyUI_IPAdapter_plus's ``cond`` and ``uncond``), for the attention
      patch;
    * ``appended`` (FLUX Redux's, one ``[1, tokens, context width]`` block per picture in order,
      with its attention bias): appended to the positive prompt's own tokens (:func:`append_tokens`)."""

    positive: tuple[Tensor, ...] = ()
    negative: tuple[Tensor, ...] = ()
    appended: tuple[Appended, ...] = ()

    def attach(
        self, positive: Conditioning, negative: Conditioning | None
    ) -> tuple[Conditioning, Conditioning | None]:
        if self.appended:
            positive = append_tokens(positive, self.appended)
        if not self.positive:
            return positive, negative
        positive = replace(positive, image_prompts=positive.image_prompts + self.positive)
        if negative is not None:
            negative = replace(negative, image_prompts=negative.image_prompts + self.negative)
        return positive, negative


NO_IMAGE_PROMPTS = ImagePrompts()


@dataclass
class Run:
    """What every stage of one generation shares."""

    pipeline: Pipeline  # the base model's
    settings: ImageSettings
    hooks: Hooks
    timings: Timings
    init: np.ndarray | None
    #: the base model's patches for every stage it samples (ControlNets, inpainting inputs)
    patches: ModelPatches = NO_MODEL_PATCHES
    missing: list[str] = field(default_factory=list)  # embeddings the prompts named, not found
    #: the reference pictures the base model's samplers take (an edit's; filled by its pass)
    references: References = NO_REFERENCES
    #: more patches of every base stage, made for its size (regions)
    stage_patches: tuple[StagePatches, ...] = ()
    #: the image prompts' tokens the base model's samplers take (filled by their passes)
    image_prompts: ImagePrompts = NO_IMAGE_PROMPTS


class StagePatches(Protocol):
    """Model patches a base-model KSampler stage gets for its own size: ``settings`` at that size,
    its latent's ``(height, width)`` in cells."""

    def __call__(self, settings: ImageSettings, latent: tuple[int, int], run: Run) -> ModelPatches: ...


class Stage(Protocol):
    def __call__(self, latent: Latent | None, run: Run) -> Latent | None: ...


@dataclass(frozen=True)
class KSample:
    """One KSampler (or KSamplerAdvanced) stage. ``pipeline`` None: the base model's, with the
    run's patches; ``sigmas`` None: the schedule of ``sampling``; ``size`` None: the latent's size
    (the prompts' size conditioning). The prompts and CFG are the settings'."""

    sampling: Sampling
    pipeline: Pipeline | None = None
    hooks: Hooks | None = None  # None: the run's (the refiner places its own models)
    sigmas: Tensor | None = None
    add_noise: bool = True
    size: tuple[int, int] | None = None

    def sized(self, latent: Latent | None, run: Run) -> ImageSettings:
        if self.size is not None:
            w, h = self.size
        elif latent is not None:
            f = (self.pipeline or run.pipeline).latent_format.downscale  # 8; FLUX.2's 16
            h, w = latent.samples.shape[-2] * f, latent.samples.shape[-1] * f
        else:
            w, h = run.settings.width, run.settings.height
        return replace(run.settings, width=w, height=h, hires=None)

    def encode(
        self, latent: Latent | None, run: Run, *, announce: bool = False
    ) -> tuple[Conditioning, Conditioning | None]:
        """The prompts' conditioning at this stage's size, encoded (or taken from the cache) and timed."""
        pipe, hooks = self.pipeline or run.pipeline, self.hooks or run.hooks
        refs = run.references if self.pipeline is None else NO_REFERENCES  # the base model's only
        t0 = time.perf_counter()
        positive, negative, missing = pipe.encode_prompts(
            self.sized(latent, run), hooks, announce=announce, pictures=refs.pictures
        )
        run.timings.text_encode += time.perf_counter() - t0
        run.missing += missing
        positive, negative = refs.attach(positive, negative)
        return run.image_prompts.attach(positive, negative) if self.pipeline is None else (positive, negative)

    def __call__(self, latent: Latent | None, run: Run) -> Latent:
        pipe, hooks = self.pipeline or run.pipeline, self.hooks or run.hooks
        sized = self.sized(latent, run)
        positive, negative = self.encode(latent, run)
        patches = NO_MODEL_PATCHES
        if self.pipeline is None:
            patches, f = run.patches, pipe.latent_format.downscale
            for more in run.stage_patches:
                patches += more(sized, (sized.height // f, sized.width // f), run)
        t0 = time.perf_counter()
        out = pipe.sample(
            sized, positive, negative, hooks, run.timings, None if latent is None else latent.samples,
            self.sampling, sigmas=self.sigmas, add_noise=self.add_noise, patches=patches,
            denoise_mask=None if latent is None else latent.noise_mask,
        )  # fmt: skip
        run.timings.sample += time.perf_counter() - t0
        return Latent(out, None if latent is None else latent.noise_mask)


@dataclass(frozen=True)
class StartLatent:
    """Empty Latent Image (txt2img; the first sampler makes it) or VAEEncode of the picture."""

    def __call__(self, latent: Latent | None, run: Run) -> Latent | None:
        if run.init is None:
            return None
        return Latent(run.pipeline.encode_image(run.init, run.hooks))


@dataclass
class Plan:
    """The stages of one generation, in order, and the base model's patches."""

    pipeline: Pipeline  # the base model's
    stages: list[Stage] = field(default_factory=list)
    patches: ModelPatches = NO_MODEL_PATCHES
    #: steps run before the prompts are encoded (an edit's reference pictures)
    prepare: list[Callable[[Run], None]] = field(default_factory=list)
    stage_patches: list[StagePatches] = field(default_factory=list)

    def samplers(self) -> list[KSample]:
        return [s for s in self.stages if isinstance(s, KSample)]

    def last_sampler(self) -> int:
        """The index of the last KSampler stage."""
        return max(i for i, s in enumerate(self.stages) if isinstance(s, KSample))


@dataclass
class Contribution:
    """What a pass gives the session: the models each phase places (and their manager names ->
    role), the files it keeps mapped, its PNG text (A1111's items) and the activation room the
    "sample" phase needs for it."""

    models: dict[str, list[object]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    files: tuple[Path, ...] = ()
    parameters: dict[str, str] = field(default_factory=dict)
    sample_bytes: int = 0


class Pass(Protocol):
    #: its place in the order (:data:`ORDER`)
    kind: str
    contribution: Contribution

    def plan(self, plan: Plan, settings: ImageSettings) -> None: ...


#: the passes' order in every plan
ORDER = (
    "references", "image_prompts", "redux", "start", "mask", "control_picture", "controlnets", "guidance",
    "regions", "schedules", "hires", "refiner",
)  # fmt: skip


@dataclass
class StartPass:
    """txt2img or img2img: the start latent and the first KSampler at the settings' size."""

    kind: str = "start"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        size = (settings.width, settings.height)
        plan.stages += [StartLatent(), KSample(settings.sampling, size=size)]


def ordered(passes: Sequence[Pass]) -> list[Pass]:
    """The passes in :data:`ORDER`, a start pass first; two of one kind are refused."""
    kinds = [p.kind for p in passes]
    for kind in kinds:
        if kinds.count(kind) > 1 or kind not in ORDER:
            raise ValueError(f"pass {kind!r} given twice or unknown")
    found = sorted(passes, key=lambda p: ORDER.index(p.kind))
    return found if "start" in kinds else [StartPass(), *found]


def run_plan(
    pipeline: Pipeline, settings: ImageSettings, hooks: Hooks, init: np.ndarray | None,
    passes: Sequence[Pass],
) -> tuple[Tensor, Timings, tuple[str, ...]]:  # fmt: skip
    """Plan the passes, run the stages, decode: pixels (B, 3, H, W) in [-1, 1], timings, notes."""
    from core.generate.pipeline import Timings

    plan = Plan(pipeline)
    for p in ordered(passes):
        p.plan(plan, settings)
    run = Run(
        pipeline, settings, hooks, Timings(), init, plan.patches, stage_patches=tuple(plan.stage_patches)
    )
    for step in plan.prepare:
        step(run)
    plan.samplers()[0].encode(None, run, announce=True)  # the prompts first, as the graph's encoders
    latent: Latent | None = None
    for stage in plan.stages:
        latent = stage(latent, run)
    assert latent is not None  # every plan ends on a sampler
    t0 = time.perf_counter()
    pixels = pipeline.decode(latent.samples, hooks, run.timings)
    run.timings.decode = time.perf_counter() - t0
    names = dict.fromkeys(run.missing)
    notes = [
        f"embedding {name!r} was not found in the embeddings folders and was left out of the prompt"
        for name in names
    ]
    if run.timings.tiled_decode:
        notes.append("the picture was decoded in tiles (the device had no room for a whole decode)")
    return pixels, run.timings, tuple(notes)
