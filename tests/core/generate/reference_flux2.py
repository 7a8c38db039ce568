"""FLUX.2 reference networks for the parity tests: diffusers' ``Flux2Transformer2DModel`` and
``AutoencoderKLFlux2`` with random weights (built on the meta device, then filled, so a real-width
model does not pay for torch's init), and ours loaded from the converted state dicts."""

from __future__ import annotations

from typing import Any

import torch

from core.archs.flux2.codec import diffusers_config, from_diffusers
from core.archs.flux2.keys import diffusers_to_original
from core.models.flux2 import Flux2, Flux2Config
from core.models.flux2_vae import Flux2VAE
from tests.core.generate.reference import tame_output
from tests.core.generate.reference_nextdit import _filled


def flux2_reference(
    *, heads: int = 24, context: int = 7680, double: int = 1, single: int = 1, guidance: bool = False,
    seed: int = 0,
) -> Any:  # fmt: skip
    """diffusers' FLUX.2 transformer, klein 4B's width (24 heads of 128) unless told otherwise."""
    import diffusers

    with torch.device("meta"):
        hf = diffusers.Flux2Transformer2DModel(
            num_layers=double, num_single_layers=single, num_attention_heads=heads,
            joint_attention_dim=context, guidance_embeds=guidance,
        )  # fmt: skip
    _filled(hf, seed)
    tame_output(hf.proj_out)
    return hf


def ours_from(hf: Any) -> Flux2:
    state = diffusers_to_original(hf.state_dict())
    config = Flux2Config.from_shapes({k: tuple(v.shape) for k, v in state.items()})
    ours = Flux2(config, device="meta")
    ours.load_state_dict(state, assign=True, strict=True)
    return ours.eval()


def flux2_vae_reference(*, base: int = 128, seed: int = 0) -> Any:
    """diffusers' FLUX.2 VAE (real widths by default: 128, 256, 512, 512; two resnets a level),
    random weights and batch-norm statistics."""
    import diffusers

    mult = (1, 2, 4, 4)
    with torch.device("meta"):
        hf = diffusers.AutoencoderKLFlux2(
            block_out_channels=tuple(base * m for m in mult), norm_num_groups=min(32, base)
        )
    hf.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if p.ndim >= 2:
                p.copy_(noise / (p[0].numel() ** 0.5))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            else:
                p.copy_(0.1 * noise)
        hf.bn.running_mean.copy_(0.3 * torch.randn(hf.bn.running_mean.shape, generator=gen))
        hf.bn.running_var.copy_(0.5 + torch.rand(hf.bn.running_var.shape, generator=gen))
        hf.bn.num_batches_tracked.zero_()
    return hf.eval()


def vae_from(hf: Any) -> Flux2VAE:
    state = from_diffusers(hf.state_dict(), "vae-flux2")
    ours = Flux2VAE(diffusers_config(hf.state_dict()), device="meta")
    ours.load_state_dict(dict(state), assign=True, strict=True)
    return ours.eval()
