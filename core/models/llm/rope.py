"""Rotary position embeddings of the decoder LLMs (rotate-half form, as transformers and ComfyUI).

Frequencies are computed in float32 from the base (``theta``) and an optional scaling; cos/sin
tables are built once per forward and per distinct (theta, scaling) of the layers.
"""

from __future__ import annotations

import math

import torch

from core.models.llm.config import RopeScaling


def inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None) -> torch.Tensor:
    """(head_dim / 2,) float32 inverse frequencies ``theta ** (-2i / head_dim)``, scaled."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if scaling is None:
        return inv
    if scaling.kind == "linear":
        return inv / scaling.factor
    # llama3: wavelengths longer than original/low_freq_factor are divided by factor, shorter than
    # original/high_freq_factor kept, and the band between blended smoothly
    low_wavelen = scaling.original_max_positions / scaling.low_freq_factor
    high_wavelen = scaling.original_max_positions / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / scaling.factor, inv)
    smooth = (scaling.original_max_positions / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    middle = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(middle, blended, scaled)


def rope_tables(
    positions: torch.Tensor, head_dim: int, theta: float, scaling: RopeScaling | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (L, head_dim) float32 for integer ``positions`` (L,)."""
    inv = inverse_frequencies(head_dim, theta, scaling).to(positions.device)
    freqs = positions.float()[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, D) rotated by tables (L, D) in x's dtype."""
    c, s = cos.to(x.dtype), sin.to(x.dtype)
    return x * c + _rotate_half(x) * s


def mrope_tables(
    positions: torch.Tensor, head_dim: int, theta: float, sections: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen2.5-VL's multimodal cos and sin (L, head_dim) for (time, row, column) ``positions``
    (3, L): the frequencies in ``sections`` (time, row, column, in each half of the head) take
    their angles from their own axis (transformers' ``mrope_section``, ComfyUI's ``rope_dims``)."""
    tables = [rope_tables(positions[axis], head_dim, theta, None) for axis in range(3)]
    split = list(sections) * 2

    def pick(which: int) -> torch.Tensor:
        parts = [torch.split(t[which], split, dim=-1) for t in tables]
        return torch.cat([parts[i % 3][i] for i in range(len(split))], dim=-1)

    return pick(0), pick(1)
