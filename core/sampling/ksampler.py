"""One KSampler run: what ComfyUI's KSampler node does with a model, a seed and a latent.

1. Sigmas from scheduler, steps, sampler and denoise (:mod:`core.sampling.sigmas`); none (denoise
   0) returns the latent unchanged.
2. The initial noise: one CPU ``randn`` of the latent's shape from the seed (:mod:`.noise`).
3. The starting latent enters the model's space (``LatentFormat.process_in``), except an
   all-zero latent (Empty Latent Image), which ComfyUI leaves as it is.
4. Noise and latent are mixed by the prediction type's ``noise_scaling``; for eps/v models a
   run that starts at (or above) the table's largest sigma is a "max denoise" and its noise is
   scaled by ``sqrt(1 + sigma^2)`` instead of ``sigma``.
5. The sampler walks the sigmas with the CFG denoiser; the interrupt check runs before every
   model forward, the progress callback after every step.
6. ``inverse_noise_scaling`` at the final sigma, then ``process_out`` back to the VAE's space.

Nothing the caller passed is modified; an interrupted run raises ``InterruptedByUser`` and
leaves no state behind, so the same request run again gives the same latent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from core.detect.spec import LatentFormat
from core.errors import LoadoutError
from core.models.patches import NetworkPatches
from core.sampling.cfg import CfgDenoiser
from core.sampling.conditioning import Conditioning
from core.sampling.denoiser import DiffusionModel, ModelDenoiser
from core.sampling.masked import MaskedDenoiser, latent_mask
from core.sampling.model_sampling import ModelSampling
from core.sampling.noise import check_seed, initial_noise
from core.sampling.patches import NO_MODEL_PATCHES, ModelPatches, StepInfo
from core.sampling.samplers import ModelFn, SamplerContext, SamplerOptions, SamplerSpec, get_sampler
from core.sampling.schedulers import SCHEDULERS
from core.sampling.sigmas import ksampler_sigmas


@dataclass(frozen=True)
class SamplingRequest:
    """The KSampler widgets. ``batch_index``: ComfyUI's latent batch indices (a latent picked
    from a batch keeps the noise it had there)."""

    seed: int
    steps: int = 20
    cfg: float = 8.0
    sampler: str = "euler"
    scheduler: str = "normal"
    denoise: float = 1.0
    options: SamplerOptions = field(default_factory=SamplerOptions)
    batch_index: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed)
        get_sampler(self.sampler)
        if self.scheduler not in SCHEDULERS:
            raise LoadoutError(
                f"unknown scheduler {self.scheduler!r}",
                why="schedulers are named as in ComfyUI's KSampler",
                fix="use one of: " + ", ".join(SCHEDULERS),
                code="bad_argument",
            )
        if self.steps < 1:
            raise LoadoutError(
                f"{self.steps} steps were asked for",
                why="a run needs at least one step",
                fix="set steps to 1 or more",
                code="bad_argument",
            )
        if not math.isfinite(self.cfg):
            raise LoadoutError(
                f"the CFG scale {self.cfg} is not a number",
                why="CFG must be a finite number",
                fix="set CFG to a value such as 7",
                code="bad_argument",
            )
        if not 0.0 <= self.denoise <= 1.0:
            raise LoadoutError(
                f"the denoise strength {self.denoise} is out of range",
                why="denoise is the fraction of the schedule to run, from 0 to 1",
                fix="set denoise between 0 and 1 (1 for text-to-image)",
                code="bad_argument",
            )


@dataclass(frozen=True)
class StepProgress:
    """``step`` of ``total`` steps is done; ``denoised`` is that step's estimate of the clean
    latent in the model's space (for previews)."""

    step: int
    total: int
    denoised: Tensor


def empty_latent(batch: int, width: int, height: int, latent_format: LatentFormat) -> Tensor:
    """ComfyUI's Empty Latent Image: zeros ``[B, C, H/f, W/f]`` (float32, CPU), ``f`` the format's
    pixels per latent (8; FLUX.2's 16, as its ``EmptyFlux2LatentImage``)."""
    f = latent_format.downscale
    if batch < 1 or width < f or height < f or width % f or height % f:
        raise LoadoutError(
            f"an empty latent of {batch} x {width}x{height} cannot be made",
            why=f"the size must be a positive multiple of {f} and the batch at least 1",
            fix="pick a size such as 1024x1024",
            code="bad_argument",
        )
    return torch.zeros(batch, latent_format.channels, height // f, width // f)


def is_max_denoise(ms: ModelSampling, first_sigma: Tensor) -> bool:
    sigma_max, sigma = float(ms.sigma_max), float(first_sigma)
    return math.isclose(sigma_max, sigma, rel_tol=1e-05) or sigma > sigma_max


def _request_sigmas(
    sampling: ModelSampling, request: SamplingRequest, latent: Tensor, latent_format: LatentFormat
) -> Tensor:
    """The request's schedule; the picture's size (latent x the format's downscale) goes to the
    schedules that take it."""
    down = latent_format.downscale
    size = (latent.shape[-1] * down, latent.shape[-2] * down)
    return ksampler_sigmas(sampling, request.scheduler, request.sampler, request.steps, request.denoise, size)


def sample(
    model: DiffusionModel,
    sampling: ModelSampling,
    latent_format: LatentFormat,
    latent: Tensor,
    positive: Conditioning,
    negative: Conditioning | None,
    request: SamplingRequest,
    *,
    device: torch.device | str = "cpu",
    compute_dtype: torch.dtype = torch.float32,
    check: Callable[[], None] | None = None,
    progress: Callable[[StepProgress], None] | None = None,
    before_forward: Callable[[], None] | None = None,
    sigmas: Tensor | None = None,
    add_noise: bool = True,
    denoise_mask: Tensor | None = None,
    patches: ModelPatches = NO_MODEL_PATCHES,
) -> Tensor:
    """Run the request; returns the final latent in the VAE's space (float32, on ``device``).

    ``sigmas`` replaces the request's schedule (KSamplerAdvanced's start/end steps); ``add_noise``
    False starts from the latent alone (zero noise); ``denoise_mask`` (any size, 1 = repaint;
    resized to the latent as ComfyUI's ``prepare_mask``) keeps the rest of the latent at every
    step, as ComfyUI's KSamplerX0Inpaint; ``patches`` what features change in every model call
    (:mod:`core.sampling.patches`)."""
    _check_latent(latent, latent_format)
    spec = get_sampler(request.sampler)
    dev = torch.device(device)
    if sigmas is None:
        sigmas = _request_sigmas(sampling, request, latent, latent_format)
    if len(sigmas) == 0:
        return latent.to(dev, copy=True)
    if check is not None:
        check()
    noise, start = _noise_and_start(latent, latent_format, request, dev, add_noise)
    sigmas = sigmas.to(dev)
    x = sampling.noise_scaling(sigmas[0], noise, start, is_max_denoise(sampling, sigmas[0]))

    denoiser = ModelDenoiser(model, sampling, compute_dtype, _before(check, before_forward), patches)

    guided: ModelFn = CfgDenoiser(denoiser, positive, negative, request.cfg, patches, _with_more(denoiser))
    if denoise_mask is not None:
        mask = latent_mask(denoise_mask, latent.shape).to(dev)
        guided = MaskedDenoiser(guided, sampling, mask, noise, start)
    total = len(sigmas) - 1

    def report(i: int, denoised: Tensor) -> None:
        for callback in patches.steps:
            callback(StepInfo(i + 1, total, sigmas[i], denoised))
        if progress is not None:
            progress(StepProgress(i + 1, total, denoised))

    ctx = SamplerContext(sampling, request.seed, request.options, report)
    with torch.inference_mode():
        out = spec.fn(guided, x, sigmas, ctx)
        out = sampling.inverse_noise_scaling(_final_sigma(spec, sigmas), out)
    return latent_format.process_out(out.to(torch.float32))


def _with_more(denoiser: ModelDenoiser) -> Callable[[NetworkPatches], ModelDenoiser]:
    """The denoiser with more network patches (a post-CFG function's second run)."""

    def patched(more: NetworkPatches) -> ModelDenoiser:
        return replace(denoiser, patches=denoiser.patches + ModelPatches(network=more))

    return patched


def _before(
    check: Callable[[], None] | None, before_forward: Callable[[], None] | None
) -> Callable[[], None]:
    """What runs before each model call: the interrupt check, then the caller's own hook."""

    def before() -> None:
        if check is not None:
            check()
        if before_forward is not None:
            before_forward()

    return before


def _check_latent(latent: Tensor, latent_format: LatentFormat) -> None:
    if latent.ndim != 4 or latent.shape[1] != latent_format.channels:
        raise LoadoutError(
            f"the latent's shape {list(latent.shape)} does not fit this model",
            why=f"a [batch, {latent_format.channels}, height/8, width/8] latent is needed",
            fix="start from an empty latent of the model's family or encode the image with its VAE",
            code="bad_argument",
        )


def _noise_and_start(
    latent: Tensor, latent_format: LatentFormat, request: SamplingRequest, dev: torch.device, add_noise: bool
) -> tuple[Tensor, Tensor]:
    """The seed's noise (zero without ``add_noise``) and the starting latent in the model's space
    (an empty latent is left as it is)."""
    noise = initial_noise(latent.shape, request.seed, request.batch_index).to(dev)
    if not add_noise:
        noise = torch.zeros_like(noise)
    start = latent.to(device=dev, dtype=torch.float32)
    if torch.count_nonzero(start) > 0:
        start = latent_format.process_in(start)
    return noise, start


def _final_sigma(spec: SamplerSpec, sigmas: Tensor) -> Tensor:
    """The sigma the result is unscaled at: the sampler's own last sigma where it ends on one."""
    final = sigmas[-1]
    if spec.final_sigma is not None and float(final) == 0.0:
        final = torch.full_like(final, spec.final_sigma)
    return final
