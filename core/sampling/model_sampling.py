"""Model sampling: a family's noise levels (sigmas), its timestep <-> sigma maps, and its
prediction type, together in one :class:`ModelSampling`.

Noise tables (facts from ComfyUI's ``comfy/model_sampling.py`` and ``supported_models.py``):

- :class:`DiscreteSchedule` (SD1/SD2/SDXL, PixArt): 1000 training steps, "scaled linear" betas
  (``linspace(sqrt(0.00085), sqrt(0.012), 1000)^2`` in float64; ComfyUI's "linear") or, for
  PixArt, "linear" betas (``linspace(0.0001, 0.02, 1000)``; ComfyUI's "sqrt_linear"),
  ``alphas_cumprod`` their running product, ``sigma = sqrt((1 - a) / a)``, kept as float32 with
  log-sigmas taken in float64. A sigma's timestep is the index of the nearest log-sigma (an
  integer); a fractional timestep interpolates log-sigma linearly. Zero-terminal-SNR files (the
  ``ztsnr`` key; ComfyUI's ``zsnr``) rescale the table first: ``sqrt(alphas_cumprod)`` shifted so
  its last value is 0 and scaled so its first is unchanged, then the last ``alphas_cumprod`` set
  to 4.8973451890853435e-08 (sigma_max about 4518 instead of 14.6), in float64.
- :class:`FlowSchedule` (SD3, Flux-schnell, Chroma, AuraFlow): ``sigma(t) = shift * t /
  (1 + (shift - 1) * t)`` for t in (0, 1], tabulated at 1000 points; the network's timestep is
  ``sigma * multiplier`` (1000 for SD3, 1 for Flux-schnell and Chroma). SD3 uses shift 3.0.
- :class:`FluxSchedule` (Flux-dev and its variants): ``sigma(t) = e^mu / (e^mu + 1/t - 1)``
  with ``mu = shift`` (1.15 by default; ComfyUI's ``ModelSamplingFlux`` node can set another),
  tabulated at 10000 points; the timestep is sigma itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from core.detect.catalog import sampling_spec
from core.detect.spec import BetaSchedule, SamplingSpec
from core.errors import LoadoutError
from core.sampling.prediction import EpsPrediction, FlowPrediction, Prediction, VPrediction


class Schedule(Protocol):
    """A family's noise table and its timestep maps."""

    @property
    def sigmas(self) -> Tensor: ...  # ascending, float32

    def timestep(self, sigma: Tensor) -> Tensor: ...

    def sigma(self, timestep: Tensor) -> Tensor: ...

    def percent_to_sigma(self, percent: float) -> float: ...


def scaled_linear_sigmas(
    steps: int = 1000,
    beta_start: float = 0.00085,
    beta_end: float = 0.012,
    beta_schedule: BetaSchedule = "scaled_linear",
) -> Tensor:
    """Sigmas of a DDPM beta schedule ("scaled_linear" by default, or "linear"), in float64."""
    if beta_schedule == "linear":
        betas = torch.linspace(beta_start, beta_end, steps, dtype=torch.float64)
    else:
        betas = torch.linspace(beta_start**0.5, beta_end**0.5, steps, dtype=torch.float64) ** 2
    alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
    return ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5


#: the last ``alphas_cumprod`` of a zero-terminal-SNR table (ComfyUI's; 0 would be an infinite sigma)
ZTSNR_LAST_ALPHA_BAR = 4.8973451890853435e-08


def rescale_zero_terminal_snr(sigmas: Tensor) -> Tensor:
    """A sigma table rescaled to zero terminal SNR (see the module notes); float64 in and out."""
    root = (1 / (sigmas * sigmas + 1)).sqrt()
    first, last = root[0].clone(), root[-1].clone()
    root = (root - last) * (first / (first - last))
    alphas_bar = root**2
    alphas_bar[-1] = ZTSNR_LAST_ALPHA_BAR
    return ((1 - alphas_bar) / alphas_bar) ** 0.5


@dataclass(frozen=True)
class DiscreteSchedule:
    steps: int = 1000
    beta_start: float = 0.00085
    beta_end: float = 0.012
    beta_schedule: BetaSchedule = "scaled_linear"
    zsnr: bool = False  # zero terminal SNR (the file's ``ztsnr`` key)
    sigmas: Tensor = field(init=False, repr=False, compare=False)
    log_sigmas: Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table = scaled_linear_sigmas(self.steps, self.beta_start, self.beta_end, self.beta_schedule)
        if self.zsnr:
            table = rescale_zero_terminal_snr(table)
        object.__setattr__(self, "sigmas", table.float())
        object.__setattr__(self, "log_sigmas", table.log().float())

    def timestep(self, sigma: Tensor) -> Tensor:
        """Index of the nearest tabulated sigma in log space (an integer tensor)."""
        distances = sigma.log().to(self.log_sigmas.device) - self.log_sigmas[:, None]
        return distances.abs().argmin(dim=0).view(sigma.shape).to(sigma.device)

    def sigma(self, timestep: Tensor) -> Tensor:
        t = torch.clamp(timestep.float().to(self.log_sigmas.device), min=0, max=len(self.sigmas) - 1)
        low, high = t.floor().long(), t.ceil().long()
        w = t.frac()
        log_sigma = (1 - w) * self.log_sigmas[low] + w * self.log_sigmas[high]
        return log_sigma.exp().to(timestep.device)

    def percent_to_sigma(self, percent: float) -> float:
        if percent <= 0.0:
            return 999999999.9
        if percent >= 1.0:
            return 0.0
        return float(self.sigma(torch.tensor((1.0 - percent) * 999.0)).item())


def shift_time(shift: float, t: Tensor | float) -> Tensor | float:
    """SD3's timestep shift ``shift * t / (1 + (shift - 1) * t)``."""
    if shift == 1.0:
        return t
    return shift * t / (1 + (shift - 1) * t)


@dataclass(frozen=True)
class FlowSchedule:
    shift: float = 1.0
    multiplier: float = 1000.0
    points: int = 1000
    sigmas: Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        grid = torch.arange(1, self.points + 1, 1) / self.points
        object.__setattr__(self, "sigmas", self.sigma(grid * self.multiplier))

    def timestep(self, sigma: Tensor) -> Tensor:
        return sigma * self.multiplier

    def sigma(self, timestep: Tensor) -> Tensor:
        out = shift_time(self.shift, timestep / self.multiplier)
        assert isinstance(out, Tensor)
        return out

    def percent_to_sigma(self, percent: float) -> float:
        if percent <= 0.0:
            return 1.0
        if percent >= 1.0:
            return 0.0
        return float(shift_time(self.shift, 1.0 - percent))


def flux_time_shift(mu: float, t: Tensor | float) -> Tensor | float:
    """Flux's resolution-dependent shift ``e^mu / (e^mu + (1/t - 1))``."""
    return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** 1.0)


@dataclass(frozen=True)
class FluxSchedule:
    shift: float = 1.15
    points: int = 10000
    sigmas: Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigmas", self.sigma(torch.arange(1, self.points + 1, 1) / self.points))

    def timestep(self, sigma: Tensor) -> Tensor:
        return sigma

    def sigma(self, timestep: Tensor) -> Tensor:
        out = flux_time_shift(self.shift, timestep)
        assert isinstance(out, Tensor)
        return out

    def percent_to_sigma(self, percent: float) -> float:
        if percent <= 0.0:
            return 1.0
        if percent >= 1.0:
            return 0.0
        return float(flux_time_shift(self.shift, 1.0 - percent))


@dataclass(frozen=True)
class ModelSampling:
    """A family's schedule and prediction type: everything samplers need to know of the model."""

    schedule: DiscreteSchedule | FlowSchedule | FluxSchedule
    prediction: Prediction

    @property
    def sigmas(self) -> Tensor:
        return self.schedule.sigmas

    @property
    def sigma_min(self) -> Tensor:
        return self.schedule.sigmas[0]

    @property
    def sigma_max(self) -> Tensor:
        return self.schedule.sigmas[-1]

    @property
    def is_flow(self) -> bool:
        return self.prediction.is_flow

    def timestep(self, sigma: Tensor) -> Tensor:
        return self.schedule.timestep(sigma)

    def sigma(self, timestep: Tensor) -> Tensor:
        return self.schedule.sigma(timestep)

    def percent_to_sigma(self, percent: float) -> float:
        return self.schedule.percent_to_sigma(percent)

    def calculate_input(self, sigma: Tensor, x: Tensor) -> Tensor:
        return self.prediction.calculate_input(sigma, x)

    def calculate_denoised(self, sigma: Tensor, model_output: Tensor, x: Tensor) -> Tensor:
        return self.prediction.calculate_denoised(sigma, model_output, x)

    def noise_scaling(
        self, sigma: Tensor, noise: Tensor, latent: Tensor, max_denoise: bool = False
    ) -> Tensor:
        return self.prediction.noise_scaling(sigma, noise, latent, max_denoise)

    def inverse_noise_scaling(self, sigma: Tensor, latent: Tensor) -> Tensor:
        return self.prediction.inverse_noise_scaling(sigma, latent)


def eps_discrete() -> ModelSampling:
    return ModelSampling(DiscreteSchedule(), EpsPrediction())


def v_discrete() -> ModelSampling:
    return ModelSampling(DiscreteSchedule(), VPrediction())


def flow_shift(shift: float = 3.0, multiplier: float = 1000.0) -> ModelSampling:
    return ModelSampling(FlowSchedule(shift=shift, multiplier=multiplier), FlowPrediction())


def flux_shift(shift: float = 1.15) -> ModelSampling:
    return ModelSampling(FluxSchedule(shift=shift), FlowPrediction())


def for_family(
    family: str, *, v_prediction: bool = False, shift: float | None = None, zsnr: bool = False
) -> ModelSampling:
    """The model sampling ComfyUI uses for a diffusion family id (read from its record's spec).

    ``v_prediction`` selects v-prediction for the discrete families (SD2-768-v and v-pred SDXL
    finetunes); ``zsnr`` their zero-terminal-SNR table; ``shift`` overrides the flow families'
    default shift (ComfyUI's ``ModelSamplingSD3`` / ``ModelSamplingFlux`` nodes).
    """
    return from_spec(sampling_spec(family), family, v_prediction=v_prediction, shift=shift, zsnr=zsnr)


def from_spec(
    spec: SamplingSpec,
    name: str,
    *,
    v_prediction: bool = False,
    shift: float | None = None,
    zsnr: bool = False,
) -> ModelSampling:
    """The model sampling a :class:`SamplingSpec` names (``name``: the family, for messages)."""
    if spec.schedule == "discrete":
        if shift is not None:
            raise LoadoutError(
                f"a shift was given for {name}",
                why="discrete (SD1/SD2/SDXL) schedules have no shift",
                fix="leave the shift unset for this model",
                code="bad_argument",
            )
        table = DiscreteSchedule(
            beta_start=spec.beta_start, beta_end=spec.beta_end, beta_schedule=spec.beta_schedule, zsnr=zsnr
        )
        return ModelSampling(table, VPrediction() if v_prediction else EpsPrediction())
    if v_prediction or zsnr:
        raise LoadoutError(
            f"{'v-prediction' if v_prediction else 'zero terminal SNR'} was asked for {name}",
            why="only discrete-schedule families (SD1/SD2/SDXL) have a v-prediction variant",
            fix="leave v-prediction off for this model",
            code="bad_argument",
        )
    value = spec.shift if shift is None else shift
    if spec.schedule == "flux":
        return flux_shift(value)
    return flow_shift(value, spec.multiplier)
