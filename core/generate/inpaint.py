"""Inpainting as ComfyUI does it, on the picture ``--init`` and a mask (white = repaint).

* A regular checkpoint: VAEEncode -> SetLatentNoiseMask -> KSampler. The mask is resized to the
  latent (bilinear, ``prepare_mask``) and the sampler keeps the unmasked latent at every step
  (:mod:`core.sampling.masked`).
* An inpainting checkpoint (a UNet with 4 + 5 input channels, ``inspect`` variant "inpaint"):
  InpaintModelConditioning. The mask is resized to the picture (bilinear) and cropped with it to a
  multiple of 8; the masked pixels become grey (``(p - 0.5) * (1 - round(mask)) + 0.5``) and are
  encoded; the UNet's extra channels are the mask at the latent's size (bilinear, centre, rounded)
  and that latent in the model's space; the sampler keeps the unmasked latent as above.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from core.errors import ModelMismatchError
from core.generate.controlnet import center_resize
from core.generate.pictures import read_mask
from core.generate.pipeline import Hooks, Pipeline


def _crop8(h: int, w: int) -> tuple[int, int, int, int]:
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
) -> tuple[Tensor, Tensor]:
    """InpaintModelConditioning: (the UNet's extra channels, the noise mask at picture size)."""
    h, w = rgb.shape[0], rgb.shape[1]
    m = F.interpolate(mask.reshape(-1, 1, *mask.shape[-2:]), size=(h, w), mode="bilinear")
    top, left, ch, cw = _crop8(h, w)
    pixels = torch.from_numpy(np.array(rgb)).float().div(255.0).permute(2, 0, 1)[None]
    pixels = pixels[:, :, top : top + ch, left : left + cw]
    m = m[:, :, top : top + ch, left : left + cw]
    keep = 1.0 - m.round()
    grey = (pixels - 0.5) * keep + 0.5
    latent = pipeline.latent_format.process_in(encode_unit_pixels(pipeline, grey, hooks))
    lh, lw = latent.shape[-2], latent.shape[-1]
    small = center_resize(m, lw, lh, mode="bilinear").round()
    return torch.cat([small, latent], dim=1), m


def prepare_inpaint(pipeline: Pipeline, mask_path: Path, rgb: np.ndarray, hooks: Hooks) -> dict[str, str]:
    """Set the pipeline up to repaint the white part of the mask; returns the infotext items."""
    mask = torch.from_numpy(read_mask(mask_path))
    channels = pipeline.latent_format.channels
    extra = pipeline.adapter.in_channels - channels
    if extra == 0:
        pipeline.denoise_mask = mask
        return {}
    if extra != channels + 1:
        raise ModelMismatchError(
            f"this model takes {extra} extra input channels, which Loadout cannot fill for inpainting",
            why="inpainting models take the mask and the masked picture's latent (1 + 4 channels)",
            fix="Use a regular or an inpainting checkpoint",
            code="unsupported_variant",
        )
    concat, noise_mask = inpaint_model_concat(pipeline, rgb, mask, hooks)
    pipeline.adapter.concat = concat
    pipeline.denoise_mask = noise_mask
    return {}
