"""Next-DiT reference networks for the parity tests: diffusers' ``ZImageTransformer2DModel`` and
``Lumina2Transformer2DModel`` with random weights (built on the meta device, then filled, so a
real-width model does not pay for torch's init), and ours loaded from the converted state dict."""

from __future__ import annotations

import math
from typing import Any

import torch

from core.archs.nextdit.keys import diffusers_to_original
from core.models.nextdit import NextDiT, NextDiTConfig
from tests.core.generate.reference import tame_output


def _filled(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Weights of a trained network's scale: matrices by 1/sqrt(fan-in), norm weights about 1,
    biases and pad tokens about 0.1 (diffusers names modulation Linears ``norm1.linear``: only 1-D
    weights are norms here)."""
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if p.ndim >= 2 and "pad_token" not in name:
                p.copy_(noise / math.sqrt(p[0].numel()))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            else:
                p.copy_(0.1 * noise)
    return model.eval()


def z_image_reference(
    *, dim: int = 3840, heads: int = 30, layers: int = 1, refiners: int = 0, cap: int = 2560, seed: int = 0
) -> Any:
    """diffusers' Z-Image transformer (128-channel heads: its rotary axes are fixed)."""
    import diffusers

    with torch.device("meta"):
        hf = diffusers.ZImageTransformer2DModel(
            dim=dim, n_layers=layers, n_refiner_layers=refiners, n_heads=heads, n_kv_heads=heads,
            cap_feat_dim=cap, axes_lens=[1536, 512, 512],
        )  # fmt: skip
    _filled(hf, seed)
    tame_output(hf.all_final_layer["2-1"].linear)
    return hf


def lumina2_reference(
    *, dim: int = 2304, heads: int = 24, kv_heads: int = 8, layers: int = 1, refiners: int = 0,
    cap: int = 2304, seed: int = 0,
) -> Any:  # fmt: skip
    """diffusers' Lumina 2 transformer (96-channel heads: its rotary axes are fixed)."""
    import diffusers

    with torch.device("meta"):
        hf = diffusers.Lumina2Transformer2DModel(
            hidden_size=dim, num_layers=layers, num_refiner_layers=refiners, num_attention_heads=heads,
            num_kv_heads=kv_heads, cap_feat_dim=cap, ffn_dim_multiplier=None,
        )  # fmt: skip
    hf.rope_embedder.freqs_cis = hf.rope_embedder._precompute_freqs_cis(
        hf.rope_embedder.axes_dim, hf.rope_embedder.axes_lens, hf.rope_embedder.theta
    )  # made on the meta device with the module: computed again on the CPU
    _filled(hf, seed)
    tame_output(hf.norm_out.linear_2)
    return hf


def ours_from(hf: Any) -> NextDiT:
    state = diffusers_to_original(hf.state_dict())
    config = NextDiTConfig.from_shapes({k: tuple(v.shape) for k, v in state.items()})
    ours = NextDiT(config, device="meta")
    ours.load_state_dict(state, assign=True, strict=True)
    return ours.eval()


def z_image_velocity(hf: Any, x: torch.Tensor, sigma: torch.Tensor, ctx: list[torch.Tensor]) -> torch.Tensor:
    """What ComfyUI's sampler sees from diffusers' model: the ZImagePipeline's ``-model(x, 1 - sigma)``."""
    with torch.no_grad():
        out = hf([xi[:, None] for xi in x], 1.0 - sigma, ctx, return_dict=False)[0]
    return -torch.stack([o[:, 0] for o in out])


def lumina2_velocity(hf: Any, x: torch.Tensor, sigma: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
    """Lumina2Pipeline's ``-model(x, 1 - sigma)`` with every caption token attended (no padding)."""
    mask = torch.ones(ctx.shape[:2], dtype=torch.bool)
    with torch.no_grad():
        out = hf(x, 1.0 - sigma, ctx, mask, return_dict=False)[0]
    return -out
