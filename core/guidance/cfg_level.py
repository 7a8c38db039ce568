"""The patches that change how the positive and negative predictions combine, as ComfyUI's nodes
compute them: RescaleCFG (``nodes_model_advanced.py``), CFG-Zero* and CFGNorm (``nodes_cfg.py``),
APG (``nodes_apg.py``) and Epsilon Scaling (``nodes_eps.py``). The math is pure functions of tensors;
the records say where they go (pre-CFG, the guidance function, post-CFG)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from core.guidance.base import GuidanceContext, check_record, number
from core.sampling.patches import CfgCall, ModelPatches, StepInfo


def rescale_cfg(call: CfgCall, multiplier: float) -> Tensor:
    """RescaleCFG: CFG on v-prediction outputs (ComfyUI's conversion, whatever the model's own
    prediction), its spread rescaled to the positive's, mixed by ``multiplier``."""
    x_orig = call.x
    sigma = call.sigma.view(call.sigma.shape[:1] + (1,) * (x_orig.ndim - 1))
    cond_eps, uncond_eps = x_orig - call.cond, x_orig - call.uncond  # ComfyUI's args["cond"/"uncond"]
    x = x_orig / (sigma * sigma + 1.0)
    cond = ((x - (x_orig - cond_eps)) * (sigma**2 + 1.0) ** 0.5) / sigma
    uncond = ((x - (x_orig - uncond_eps)) * (sigma**2 + 1.0) ** 0.5) / sigma
    x_cfg = uncond + call.scale * (cond - uncond)
    ro_pos = torch.std(cond, dim=(1, 2, 3), keepdim=True)
    ro_cfg = torch.std(x_cfg, dim=(1, 2, 3), keepdim=True)
    x_final = multiplier * (x_cfg * (ro_pos / ro_cfg)) + (1.0 - multiplier) * x_cfg
    return x_orig - (x_orig - (x - x_final * sigma / (sigma * sigma + 1.0) ** 0.5))


def optimized_scale(positive: Tensor, negative: Tensor) -> Tensor:
    """CFG-Zero*'s per-item scale ``<p, n> / (|n|^2 + 1e-8)``, shaped to broadcast."""
    p, n = positive.reshape(positive.shape[0], -1), negative.reshape(negative.shape[0], -1)
    st = torch.sum(p * n, dim=1, keepdim=True) / (torch.sum(n**2, dim=1, keepdim=True) + 1e-8)
    return st.reshape([positive.shape[0]] + [1] * (positive.ndim - 1))


def cfg_zero_star(call: CfgCall, denoised: Tensor) -> Tensor:
    """CFG-Zero*'s optimized scale on the combined result (ComfyUI's post-CFG form)."""
    alpha = optimized_scale(call.x - call.cond, call.x - call.uncond)
    return denoised + call.uncond * (alpha - 1.0) + call.scale * call.uncond * (1.0 - alpha)


def project(v0: Tensor, v1: Tensor) -> tuple[Tensor, Tensor]:
    """``v0``'s parts parallel and orthogonal to ``v1`` (per item, over C, H, W)."""
    v1 = torch.nn.functional.normalize(v1, dim=[-1, -2, -3])  # type: ignore[arg-type]  # a list works
    parallel = (v0 * v1).sum(dim=[-1, -2, -3], keepdim=True) * v1
    return parallel, v0 - parallel


def apg(call: CfgCall, guidance: Tensor, eta: float, norm_threshold: float) -> CfgCall:
    """APG's predictions for plain CFG to combine, from the (momentum-averaged) guidance."""
    if norm_threshold > 0:
        norm = guidance.norm(p=2, dim=[-1, -2, -3], keepdim=True)
        guidance = guidance * torch.minimum(torch.ones_like(norm), norm_threshold / norm)
    parallel, orthogonal = project(guidance, call.cond)
    modified = orthogonal + eta * parallel
    cond = (call.uncond + modified) + (call.cond - call.uncond) / call.scale
    return call.with_predictions(cond, call.uncond)


def cfg_norm(call: CfgCall, denoised: Tensor, strength: float) -> Tensor:
    """CFGNorm (its post-CFG form): the combined estimate scaled, per position, down to the
    positive estimate's norm over the channels (never up), times ``strength``."""
    scale = call.cond.norm(dim=1, keepdim=True) / (denoised.norm(dim=1, keepdim=True) + 1e-8)
    out: Tensor = denoised * scale.clamp(min=0.0, max=1.0) * strength
    return out


def epsilon_scaling(call: CfgCall, denoised: Tensor, factor: float) -> Tensor:
    """The predicted noise divided by ``factor`` (Epsilon Scaling, its uniform schedule)."""
    return call.x - (call.x - denoised) / factor


@dataclass(frozen=True)
class RescaleCfg:
    name: ClassVar[str] = "rescale_cfg"
    title: ClassVar[str] = "RescaleCFG"
    multiplier: float = number(0.7, 0.0, 1.0, "the multiplier")

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        multiplier = self.multiplier
        return ModelPatches(guidance=lambda call: rescale_cfg(call, multiplier))


@dataclass
class _Steps:
    """Finished steps of the current sampling run (a new run starts from 0)."""

    done: int = 0

    def heard(self, info: StepInfo) -> None:
        self.done = 0 if info.step >= info.total else info.step


@dataclass(frozen=True)
class CfgZeroStar:
    """ComfyUI's CFGZeroStar; ``zero_init_steps`` > 0 adds the paper's zero-init: the first steps'
    prediction is zero (the latent stays where it is)."""

    name: ClassVar[str] = "cfg_zero_star"
    title: ClassVar[str] = "CFG-Zero*"
    zero_init_steps: int = number(0, 0, 1000, "the zero-init steps", integer=True)

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        steps, zero = _Steps(), self.zero_init_steps

        def post(call: CfgCall, denoised: Tensor) -> Tensor:
            if steps.done < zero:
                return call.x.clone()  # x - 0: a zero noise/velocity prediction
            return cfg_zero_star(call, denoised)

        return ModelPatches(post_cfg=(post,), steps=(steps.heard,) if zero else ())


@dataclass
class _Momentum:
    """APG's running average, reset when sigma rises (a new sampling run)."""

    average: Tensor | None = None
    sigma: float | None = None


@dataclass(frozen=True)
class Apg:
    name: ClassVar[str] = "apg"
    title: ClassVar[str] = "Adaptive Projected Guidance"
    eta: float = number(1.0, -10.0, 10.0, "eta")
    norm_threshold: float = number(5.0, 0.0, 50.0, "the norm threshold")
    momentum: float = number(0.0, 0.0, 1.0, "the momentum")

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        state, eta, threshold, momentum = _Momentum(), self.eta, self.norm_threshold, self.momentum

        def pre(call: CfgCall) -> CfgCall:
            sigma = float(call.sigma[0])
            if state.sigma is not None and sigma > state.sigma:
                state.average = None
            state.sigma = sigma
            guidance = call.cond - call.uncond
            if momentum > 0:
                state.average = guidance if state.average is None else momentum * state.average + guidance
                guidance = state.average
            return apg(call, guidance, eta, threshold)

        return ModelPatches(pre_cfg=(pre,))


@dataclass(frozen=True)
class EpsilonScaling:
    name: ClassVar[str] = "epsilon_scaling"
    title: ClassVar[str] = "Epsilon Scaling"
    scaling_factor: float = number(1.005, 0.5, 1.5, "the scaling factor")

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        factor = self.scaling_factor
        return ModelPatches(post_cfg=(lambda call, denoised: epsilon_scaling(call, denoised, factor),))


@dataclass(frozen=True)
class CfgNorm:
    """ComfyUI's CFGNorm (post-CFG, its default form), which its Qwen-Image-Edit templates put on
    the model at strength 1. Above 1 it would amplify the estimate every step: limited to 1."""

    name: ClassVar[str] = "cfg_norm"
    title: ClassVar[str] = "CFGNorm"
    strength: float = number(1.0, 0.0, 1.0, "the strength")

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        strength = self.strength
        return ModelPatches(post_cfg=(lambda call, denoised: cfg_norm(call, denoised, strength),))
