"""Pieces every network shares: multi-head attention on (batch, tokens, heads*dim) tensors and
sinusoidal timestep embeddings."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    heads: int,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention. q: (B, Lq, H*D), k/v: (B, Lk, H*D) -> (B, Lq, H*D).

    ``mask`` is boolean (True = attend) or additive, broadcastable to (B, H, Lq, Lk).
    """
    b, lq, inner = q.shape
    d = inner // heads
    qh = q.view(b, lq, heads, d).transpose(1, 2)
    kh = k.view(b, k.shape[1], heads, d).transpose(1, 2)
    vh = v.view(b, v.shape[1], heads, d).transpose(1, 2)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    return out.transpose(1, 2).reshape(b, lq, inner)


def attention_heads_first(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Attention on (B, H, L, D) tensors, returning (B, L, H*D)."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    b, h, length, d = out.shape
    return out.transpose(1, 2).reshape(b, length, h * d)


def timestep_embedding(
    t: torch.Tensor,
    dim: int,
    *,
    max_period: float = 10000.0,
    time_factor: float = 1.0,
    flip_sin_to_cos: bool = True,
    downscale_freq_shift: float = 0.0,
) -> torch.Tensor:
    """Sinusoidal embedding of (fractional) timesteps ``t`` (shape (N,)) -> (N, dim), float32.

    The defaults give the original Stable Diffusion layout ([cos, sin], shift 0).
    """
    t = t.float() * time_factor
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device)
    freqs = torch.exp(exponent / (half - downscale_freq_shift))
    args = t[:, None] * freqs[None]
    emb = (
        torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if flip_sin_to_cos
        else torch.cat([torch.sin(args), torch.cos(args)], dim=-1)
    )
    if dim % 2:
        emb = torch.nn.functional.pad(emb, (0, 1))
    return emb
