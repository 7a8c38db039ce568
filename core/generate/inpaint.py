"""Inpainting as ComfyUI does it, on the picture ``--init`` and a mask (white = repaint).

* A regular checkpoint: VAEEncode -> SetLatentNoiseMask -> KSampler. The mask is resized to the
  latent (bilinear, ``prepare_mask``) and the sampler keeps the unmasked latent at every step
  (:mod:`core.sampling.masked`).
* An inpainting model (a UNet with 4 + 5 input channels, ``inspect`` variant "inpaint"; FLUX.1 Fill
  with 16 + 80): InpaintModelConditioning. The mask is resized to the picture (bilinear) and
  cropped with it to a multiple of 8; the masked pixels become grey
  (``(p - 0.5) * (1 - round(mask)) + 0.5``) and are encoded; the network's extra channels are that
  latent in the model's space and the mask, as the network's :class:`InpaintChannels` lays them
  out (the UNet: the mask at the latent's size, rounded, first; Flux Fill: the mask at 8x the
  latent's size, each 8x8 cell packed into 64 channels, after); the sampler keeps the unmasked
  latent as above.

The mask pass (:class:`MaskPass`) sets the noise mask on the start latent; every later stage
carries it (the hires pass, the refiner's KSamplerAdvanced), as ComfyUI's LATENT does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from core.archs.protocols import InpaintChannels
from core.errors import LoadoutError, ModelMismatchError
from core.generate.controlnet import center_resize
from core.generate.passes import Contribution, Latent, Plan, Run, StartLatent
from core.generate.pictures import read_mask
from core.generate.pipeline import Hooks, Pipeline
from core.generate.request import ImageSettings
from core.sampling.patches import ModelPatches


def crop8(h: int, w: int) -> tuple[int, int, int, int]:
    """(top, left, height, width) of ComfyUI's VAEEncode crop to multiples of 8."""
    ch, cw = h // 8 * 8, w // 8 * 8
    return (h % 8) // 2, (w % 8) // 2, ch, cw


def encode_unit_pixels(pipeline: Pipeline, pixels: Tensor, hooks: Hooks) -> Tensor:
    """(B, 3, H, W) pixels in [0, 1] -> the VAE's latent (posterior mean), as ComfyUI's VAE.encode
    (``pixels * 2 - 1``)."""
    hooks.place("decode")
    dev, dt = pipeline.compute.device, pipeline.compute.vae_dtype
    with torch.inference_mode():
        mean = pipeline.codec.encode(pipeline.nets.vae, (pixels * 2.0 - 1.0).to(dev, dt))
    return mean.float().cpu()


def inpaint_model_concat(
    pipeline: Pipeline, rgb: np.ndarray, mask: Tensor, hooks: Hooks
) -> tuple[InpaintInputs, Tensor]:
    """InpaintModelConditioning: (the inpainting model's extra inputs, the noise mask at picture size)."""
    h, w = rgb.shape[0], rgb.shape[1]
    m = F.interpolate(mask.reshape(-1, 1, *mask.shape[-2:]), size=(h, w), mode="bilinear")
    top, left, ch, cw = crop8(h, w)
    pixels = torch.from_numpy(np.array(rgb)).float().div(255.0).permute(2, 0, 1)[None]
    pixels = pixels[:, :, top : top + ch, left : left + cw]
    m = m[:, :, top : top + ch, left : left + cw]
    keep = 1.0 - m.round()
    grey = (pixels - 0.5) * keep + 0.5
    latent = pipeline.latent_format.process_in(encode_unit_pixels(pipeline, grey, hooks))
    return InpaintInputs(latent, m, pipeline.adapter.convention.inpaint), m


@dataclass(frozen=True)
class Inpainting:
    """What the mask gives the sampler: the noise mask and, for an inpainting model, its extra
    input channels (None for a regular model)."""

    noise_mask: Tensor
    extra: InpaintInputs | None = None


def pack_cells(mask: Tensor, cell: int) -> Tensor:
    """(B, 1, h * cell, w * cell) -> (B, cell * cell, h, w): each cell's pixels as channels, row by
    row (ComfyUI's Flux ``concat_mask``, diffusers' FluxFillPipeline ``prepare_mask_latents``)."""
    b, _, hh, ww = mask.shape
    h, w = hh // cell, ww // cell
    cells = mask.reshape(b, h, cell, w, cell).permute(0, 2, 4, 1, 3)
    return cells.reshape(b, cell * cell, h, w)


@dataclass(frozen=True)
class InpaintInputs:
    """An inpainting model's extra input channels (ComfyUI's ``concat_cond``), made for each call's
    latent size as ComfyUI makes them for its noise (bilinear, centre): the grey-masked picture's
    latent (model space) and the mask, laid out as the network takes them (:class:`InpaintChannels`:
    the rounded mask at the latent's size first, or the unrounded mask at the pixels' size packed
    by cells after the latent)."""

    latent: Tensor  # (1, C, h, w) in the model's space, at the first pass's latent size
    picture_mask: Tensor  # (1, 1, H, W) at the (cropped) picture's size
    layout: InpaintChannels

    def concat(self, h: int, w: int) -> Tensor:
        """The extra channels for a (h, w) latent: (1, extra, h, w), float32."""
        latent = self.latent
        cell = self.layout.mask_cell
        if cell:
            image = center_resize(latent, w, h, mode="bilinear")
            mask = pack_cells(center_resize(self.picture_mask, w * cell, h * cell, mode="bilinear"), cell)
            return torch.cat([image, mask], dim=1)
        if latent.shape[-2:] != (h, w):
            latent = center_resize(latent, w, h, mode="bilinear")
        small = center_resize(self.picture_mask, w, h, mode="bilinear").round()
        return torch.cat([small, latent], dim=1)

    def __call__(self, x: Tensor) -> Tensor:
        concat = self.concat(x.shape[-2], x.shape[-1])
        return concat.to(device=x.device, dtype=x.dtype).expand(x.shape[0], -1, -1, -1)


def inpainting(
    pipeline: Pipeline, mask_source: Path | np.ndarray, rgb: np.ndarray, hooks: Hooks
) -> Inpainting:
    """The noise mask (and an inpainting model's inputs) that repaint the white part of the mask
    (a mask file, or a float mask in [0, 1] made here: outpainting's)."""
    found = read_mask(mask_source) if isinstance(mask_source, Path) else mask_source
    mask = torch.from_numpy(np.ascontiguousarray(found, dtype=np.float32))
    channels = pipeline.latent_format.channels
    extra = pipeline.adapter.in_channels - channels
    if extra == 0:
        return Inpainting(mask)
    wanted = channels + pipeline.adapter.convention.inpaint.mask_channels
    if extra != wanted:
        raise ModelMismatchError(
            f"this model takes {extra} extra input channels, which Loadout cannot fill for inpainting",
            why=f"its family's inpainting models take the mask and the masked picture ({wanted} channels)",
            fix="Use a regular or an inpainting model of this family",
            code="unsupported_variant",
        )
    inputs, noise_mask = inpaint_model_concat(pipeline, rgb, mask, hooks)
    return Inpainting(noise_mask, inputs)


@dataclass(frozen=True)
class SetNoiseMask:
    """SetLatentNoiseMask on the start latent (InpaintModelConditioning for an inpainting model:
    its extra inputs become the base model's patches for every stage it samples). ``mask``: a
    mask file or a float mask (H, W) in [0, 1]."""

    mask: Path | np.ndarray

    def __call__(self, latent: Latent | None, run: Run) -> Latent:
        if latent is None or run.init is None:
            raise LoadoutError(
                "a mask needs the picture it masks",
                why="inpainting repaints part of a starting picture",
                fix="Give the starting picture with the mask",
                code="bad_argument",
            )
        found = inpainting(run.pipeline, self.mask, run.init, run.hooks)
        if found.extra is not None:
            run.patches += ModelPatches(extra_inputs=(found.extra,))
        return Latent(latent.samples, found.noise_mask)


@dataclass
class MaskPass:
    """Inpainting: the noise mask set on the start latent, carried by every later stage."""

    mask: Path
    kind: str = "mask"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        start = next(i for i, s in enumerate(plan.stages) if isinstance(s, StartLatent))
        plan.stages.insert(start + 1, SetNoiseMask(self.mask))
