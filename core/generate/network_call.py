"""Calling a diffusion network the way ComfyUI's ``BaseModel.apply_model`` does.

Given the noisy latent ``x`` at noise level ``sigma`` the sampler wants the *denoised* latent. The
model sampling object (eps, v-prediction, flow) says how to scale the input, which timestep the
network sees and how to turn its output into the denoised estimate; this module knows how each
network family takes its inputs (UNet: ``(x, t, context, y)``; MMDiT: the same with flow
timesteps; Flux/Chroma: packed 2x2 patches with position ids and a guidance value).

As in ComfyUI, the network runs in its own dtype while the sampler's arithmetic stays float32:
inputs are cast to the compute dtype, the timestep stays float32, the output is cast back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from core.errors import ModelMismatchError
from core.models.chroma import Chroma
from core.models.flux import Flux, make_img_ids, make_txt_ids, pack_latents, unpack_latents
from core.models.mmdit import MMDiT
from core.models.unet import UNetModel


class ModelSamplingLike(Protocol):
    """What the network call needs from a model sampling (see core/sampling)."""

    def calculate_input(self, sigma: torch.Tensor, x: torch.Tensor) -> torch.Tensor: ...
    def calculate_denoised(
        self, sigma: torch.Tensor, model_output: torch.Tensor, x: torch.Tensor
    ) -> torch.Tensor: ...
    def timestep(self, sigma: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class DiffusionConditioning:
    """One prompt's conditioning as the network takes it (batch first)."""

    context: torch.Tensor | None  # (B, tokens, width) cross-attention / joint-attention text states
    y: torch.Tensor | None = None  # (B, adm) pooled/size vector: SDXL adm, SD3 pooled, Flux CLIP pooled
    guidance: float | None = None  # Flux-dev's distilled guidance

    def repeat_to(self, batch: int) -> DiffusionConditioning:
        def rep(t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None or t.shape[0] == batch:
                return t
            if batch % t.shape[0]:
                raise ValueError(f"cannot repeat a batch of {t.shape[0]} to {batch}")
            return t.repeat(batch // t.shape[0], *([1] * (t.ndim - 1)))

        return DiffusionConditioning(rep(self.context), rep(self.y), self.guidance)


def network_kind(model: nn.Module) -> str:
    """ "unet", "mmdit", "flux" or "chroma" (Chroma subclasses nothing of Flux's call)."""
    if isinstance(model, UNetModel):
        return "unet"
    if isinstance(model, MMDiT):
        return "mmdit"
    if isinstance(model, Chroma):
        return "chroma"
    if isinstance(model, Flux):
        return "flux"
    raise ModelMismatchError(
        f"Loadout cannot generate with a {type(model).__name__}",
        why="generation needs a diffusion model of a supported family",
        fix="Load an SD1/SD2/SDXL/SD3/Flux/Chroma checkpoint or diffusion model",
        code="wrong_kind",
    )


def _cast(t: torch.Tensor | None, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    return None if t is None else t.to(device=device, dtype=dtype)


class NetworkCall:
    """``denoised = call(x, sigma, cond)`` for one diffusion network.

    ``concat`` holds extra input channels (inpaint mask + masked latent, instruct-pix2pix image)
    appended to the scaled input, as ComfyUI's ``c_concat``.
    """

    def __init__(
        self,
        model: nn.Module,
        sampling: ModelSamplingLike,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        concat: torch.Tensor | None = None,
    ) -> None:
        self.model = model
        self.kind = network_kind(model)
        self.sampling = sampling
        self.dtype = dtype
        self.device = torch.device(device)
        self.concat = concat
        config: Any = getattr(model, "config")  # noqa: B009 - every network keeps its config
        self.config = config

    def __call__(self, x: torch.Tensor, sigma: torch.Tensor, cond: DiffusionConditioning) -> torch.Tensor:
        """``x`` float32 (B, C, h, w); ``sigma`` (B,) float32; returns the denoised latent, float32."""
        b = x.shape[0]
        cond = cond.repeat_to(b)
        xc = self.sampling.calculate_input(sigma, x)
        if self.concat is not None:
            xc = torch.cat([xc, self.concat.to(xc).expand(b, -1, -1, -1)], dim=1)
        t = self.sampling.timestep(sigma).float().to(self.device)
        xc_d = xc.to(device=self.device, dtype=self.dtype)
        context = _cast(cond.context, self.dtype, self.device)
        y = _cast(cond.y, self.dtype, self.device)
        if self.kind in ("unet", "mmdit"):
            out = self.model(xc_d, t, context, y)
        else:
            out = self._flux(xc_d, t, context, y, cond.guidance)
        return self.sampling.calculate_denoised(sigma, out.to(device=x.device, dtype=torch.float32), x)

    def _flux(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        context: torch.Tensor | None,
        y: torch.Tensor | None,
        guidance: float | None,
    ) -> torch.Tensor:
        b, _, h, w = x.shape
        if context is None:
            raise ModelMismatchError("Flux needs T5 text conditioning", code="missing_conditioning")
        img_ids = make_img_ids(b, h, w, device=self.device)
        txt_ids = make_txt_ids(b, context.shape[1], device=self.device)
        g = None
        if getattr(self.config, "guidance_embed", False):
            g = torch.full(
                (b,), 3.5 if guidance is None else guidance, device=self.device, dtype=torch.float32
            )
        tokens = pack_latents(x)
        if self.kind == "flux":
            if y is None:
                raise ModelMismatchError("Flux needs CLIP-L pooled conditioning", code="missing_conditioning")
            out: torch.Tensor = self.model(tokens, img_ids, context, txt_ids, t, y, g)
        else:
            out = self.model(tokens, img_ids, context, txt_ids, t, g)
        return unpack_latents(out, h, w)
