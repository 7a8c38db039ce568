"""What every sampler gets: the guided model, the starting latent, the sigmas, and a context
with the model sampling, the seed for its noise, and a per-step report.

A sampler is a pure function of these: no module state, nothing modified in place that the caller
owns (the input latent and sigmas are never written).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import Tensor

from core.sampling.model_sampling import ModelSampling

#: The guided denoiser a sampler calls: ``(x, sigma [B]) -> denoised``.
ModelFn = Callable[[Tensor, Tensor], Tensor]


@runtime_checkable
class UncondModelFn(Protocol):
    """A guided denoiser that can also hand back its unguided (negative-prompt) estimate, for the
    CFG++ samplers: ``with_uncond(x, sigma) -> (guided denoised, uncond denoised)``. The negative
    is evaluated even at CFG 1 (ComfyUI's ``disable_cfg1_optimization``)."""

    def __call__(self, x: Tensor, sigma: Tensor) -> Tensor: ...

    def with_uncond(self, x: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor]: ...


def with_uncond(model: ModelFn, x: Tensor, sigma: Tensor) -> tuple[Tensor, Tensor]:
    """The guided and the unguided estimate; a model without a negative is its own uncond."""
    if isinstance(model, UncondModelFn):
        return model.with_uncond(x, sigma)
    denoised = model(x, sigma)
    return denoised, denoised


@dataclass(frozen=True)
class SamplerOptions:
    """Tunables of the stochastic samplers, with ComfyUI's KSampler defaults.

    ``eta``: how much noise the ancestral/SDE steps re-inject (0 makes them deterministic);
    ``s_noise``: a scale on that noise; ``r``: dpmpp_sde's intermediate step ratio;
    ``solver_type``: dpmpp_2m_sde's second-order correction (``midpoint`` or ``heun``).
    """

    eta: float = 1.0
    s_noise: float = 1.0
    r: float = 0.5
    solver_type: str = "midpoint"


@dataclass(frozen=True)
class SamplerContext:
    sampling: ModelSampling
    seed: int
    options: SamplerOptions
    #: called once per step with the step index and the step's denoised estimate
    report: Callable[[int, Tensor], None]


class SamplerFn(Protocol):
    def __call__(self, model: ModelFn, x: Tensor, sigmas: Tensor, ctx: SamplerContext) -> Tensor: ...


def batch_sigma(x: Tensor, sigma: Tensor) -> Tensor:
    """One sigma per batch item, as the model wrapper expects."""
    return sigma * x.new_ones([x.shape[0]])


def to_d(x: Tensor, sigma: Tensor, denoised: Tensor) -> Tensor:
    """The probability-flow ODE's derivative ``dx/dsigma`` (Karras et al.)."""
    return (x - denoised) / sigma


@dataclass(frozen=True)
class SamplerSpec:
    """A sampler as the registry knows it.

    ``discard_penultimate_sigma``: ComfyUI computes ``steps + 1`` sigmas and drops the one before
    the final 0 for these samplers (dpm_2, uni_pc: their last step would otherwise be tiny).
    ``final_sigma``: the sigma that replaces a final 0 when the latent is un-scaled after sampling
    (uni_pc writes 0.001 there; it matters for flow models only).
    ``needs_uncond``: a CFG++ sampler, which steps along the negative prompt's estimate, so the
    negative is encoded and evaluated even at CFG 1.
    ``summary``: one line on what the sampler is good for (docs, the window's tooltips).
    """

    name: str
    fn: SamplerFn
    stochastic: bool = False
    discard_penultimate_sigma: bool = False
    final_sigma: float | None = None
    needs_uncond: bool = False
    summary: str = ""
