"""IP-Adapter files in h94's layout (``image_proj.*``, ``ip_adapter.N.to_k_ip/to_v_ip``) with random
weights at real width, for a UNet whose cross-attention layers have the given inner widths, and a
tiny SD1-width diffusers UNet beside Loadout's copy of it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from core.loading.convert.unet_diffusers import unet_diffusers_to_original
from core.models.unet import UNetModel
from tests.core.generate.controlnet_pair import UNET, _blocks
from tests.core.generate.reference import randomize
from tests.fixtures.st_files import write_tensors

CROSS = 768  # SD1's cross-attention width
#: the tiny UNet's cross-attention layers in the adapter's order: input 1, output 2, output 3, middle
INNER = (32, 32, 32, 64)


def _w(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=gen) / math.sqrt(shape[-1])


def _linear_proj(gen: torch.Generator, embed: int, tokens: int) -> dict[str, torch.Tensor]:
    return {
        "image_proj.proj.weight": _w(gen, tokens * CROSS, embed),
        "image_proj.proj.bias": 0.1 * torch.randn(tokens * CROSS, generator=gen),
        "image_proj.norm.weight": 1 + 0.1 * torch.randn(CROSS, generator=gen),
        "image_proj.norm.bias": 0.1 * torch.randn(CROSS, generator=gen),
    }


def _resampler(
    gen: torch.Generator, embed: int, depth: int = 4, heads: int = 12, queries: int = 16
) -> dict[str, torch.Tensor]:
    dim, inner = CROSS, 64 * heads
    out = {
        "image_proj.latents": torch.randn(1, queries, dim, generator=gen) / math.sqrt(dim),
        "image_proj.proj_in.weight": _w(gen, dim, embed),
        "image_proj.proj_in.bias": 0.1 * torch.randn(dim, generator=gen),
        "image_proj.proj_out.weight": _w(gen, CROSS, dim),
        "image_proj.proj_out.bias": 0.1 * torch.randn(CROSS, generator=gen),
        "image_proj.norm_out.weight": 1 + 0.1 * torch.randn(CROSS, generator=gen),
        "image_proj.norm_out.bias": 0.1 * torch.randn(CROSS, generator=gen),
    }  # fmt: skip
    for i in range(depth):
        p = f"image_proj.layers.{i}."
        for n in ("0.norm1", "0.norm2", "1.0"):
            out[f"{p}{n}.weight"] = 1 + 0.1 * torch.randn(dim, generator=gen)
            out[f"{p}{n}.bias"] = 0.1 * torch.randn(dim, generator=gen)
        out[f"{p}0.to_q.weight"] = _w(gen, inner, dim)
        out[f"{p}0.to_kv.weight"] = _w(gen, 2 * inner, dim)
        out[f"{p}0.to_out.weight"] = _w(gen, dim, inner)
        out[f"{p}1.1.weight"] = _w(gen, 4 * dim, dim)
        out[f"{p}1.3.weight"] = _w(gen, dim, 4 * dim)
    return out


def ip_adapter_file(path: Path, *, plus: bool, seed: int = 0) -> Path:
    """An SD1.5 IP-Adapter for the tiny UNet: base (ViT-H's 1024-wide embeds, 4 tokens) or plus
    (ViT-H's 1280-wide hidden states, 16 tokens)."""
    gen = torch.Generator().manual_seed(seed)
    state = _resampler(gen, 1280) if plus else _linear_proj(gen, 1024, 4)
    for i, inner in enumerate(INNER):
        n = 2 * i + 1
        state[f"ip_adapter.{n}.to_k_ip.weight"] = _w(gen, inner, CROSS)
        state[f"ip_adapter.{n}.to_v_ip.weight"] = _w(gen, inner, CROSS)
    return write_tensors(path, state)


def diffusers_state(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The file split as diffusers' ``load_ip_adapter`` splits a safetensors IP-Adapter."""
    flat = load_file(str(path))
    out: dict[str, dict[str, torch.Tensor]] = {"image_proj": {}, "ip_adapter": {}}
    for key, value in flat.items():
        head, rest = key.split(".", 1)
        out[head][rest] = value
    return out


def unet_pair(seed: int = 2) -> tuple[Any, UNetModel]:
    """diffusers' UNet2DConditionModel (randomized) and Loadout's UNet with its weights."""
    import diffusers

    torch.manual_seed(0)
    hf = diffusers.UNet2DConditionModel(
        sample_size=8, up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), **_blocks()
    )
    randomize(hf, seed)
    ours = UNetModel(UNET).eval()
    ours.load_state_dict(unet_diffusers_to_original(hf.state_dict(), UNET), strict=True)
    return hf.eval(), ours
