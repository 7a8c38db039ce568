"""From a raw diffusion network to a denoiser ``(x, sigma, cond) -> denoised``.

The network sees ComfyUI's inputs: ``calculate_input(sigma, x)`` cast to the compute dtype, and
the family's timestep for sigma (an integer-valued float for SD1/SD2/SDXL, ``sigma * 1000`` for
SD3, sigma for Flux). Its output is taken back to float32 before ``calculate_denoised``, so the
sampler state stays float32 whatever the compute dtype. The run's model patches
(:mod:`core.sampling.patches`) wrap the network call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from core.models.patches import NO_PATCHES, NetworkPatches
from core.sampling.conditioning import Conditioning
from core.sampling.model_sampling import ModelSampling
from core.sampling.patches import NO_MODEL_PATCHES, ModelCall, ModelPatches


class DiffusionModel(Protocol):
    """A diffusion network adapted to one signature: scaled latent ``[B, C, H, W]`` in the compute
    dtype, timesteps ``[B]`` float32, the conditioning and the network's patches -> the raw
    prediction ``[B, C, H, W]``."""

    def __call__(
        self, x: Tensor, timestep: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES
    ) -> Tensor: ...


class Denoiser(Protocol):
    """``(x, sigma [B], cond) -> denoised`` (the model's estimate of the clean latent); ``hooks``
    the call's hook group (:class:`core.sampling.cond_entry.CondEntry`)."""

    def __call__(
        self, x: Tensor, sigma: Tensor, cond: Conditioning, hooks: frozenset[str] = frozenset()
    ) -> Tensor: ...


@dataclass(frozen=True)
class ModelDenoiser:
    model: DiffusionModel
    sampling: ModelSampling
    compute_dtype: torch.dtype = torch.float32
    #: called before every forward pass (interrupt checks, placing the model on its device)
    before_forward: Callable[[], None] | None = None
    #: wrappers, network patches and extra inputs of every call
    patches: ModelPatches = NO_MODEL_PATCHES

    def __call__(
        self, x: Tensor, sigma: Tensor, cond: Conditioning, hooks: frozenset[str] = frozenset()
    ) -> Tensor:
        if self.before_forward is not None:
            self.before_forward()
        x_in = self.sampling.calculate_input(sigma, x).to(self.compute_dtype)
        timestep = self.sampling.timestep(sigma).float()
        call = ModelCall(x_in, timestep, cond.to(x_in.device, self.compute_dtype), sigma, hooks=hooks)
        out = self.patches.run(call, self._network).float()
        return self.sampling.calculate_denoised(sigma, out, x)

    def _network(self, call: ModelCall) -> Tensor:
        return self.model(call.x, call.timestep, call.cond, call.patches)
