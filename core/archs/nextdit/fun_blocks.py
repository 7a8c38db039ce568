"""The blocks of alibaba-pai's Z-Image Fun ControlNet, under the file's own (diffusers-style) names:
``attention.{to_q,to_k,to_v,to_out.0,norm_q,norm_k}``, ``feed_forward.{w1,w2,w3}``, the four
RMS norms, ``adaLN_modulation.0`` and, on control blocks, ``after_proj`` (the hint it gives) and
on the first one ``before_proj`` (where the base network's tokens join the control's).

A block computes as a Z-Image joint block (ComfyUI's ``JointTransformerBlock`` with Z-Image's
modulation): q/k RMS norms in float32 with float32's epsilon (diffusers: 1e-5), rotary angles of
the picture's tokens, tanh gates.
"""

from __future__ import annotations

import torch
from torch import nn

from core.models.flux_blocks import apply_rope
from core.models.nextdit.config import NextDiTConfig
from core.models.nextdit.network import QK_NORM_EPS, FeedForward
from core.models.patches import attend_heads
from core.ops.layers import OpSet

Device = torch.device | None
DType = torch.dtype | None


class SplitAttention(nn.Module):
    """Self-attention with separate q, k, v projections (the file's layout; ComfyUI fuses them)."""

    def __init__(self, cfg: NextDiTConfig, *, ops: OpSet, device: Device, dtype: DType) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        d, kv = cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.to_q = ops.Linear(cfg.dim, cfg.n_heads * d, bias=False, device=device, dtype=dtype)
        self.to_k = ops.Linear(cfg.dim, kv, bias=False, device=device, dtype=dtype)
        self.to_v = ops.Linear(cfg.dim, kv, bias=False, device=device, dtype=dtype)
        self.to_out = nn.ModuleList(
            [ops.Linear(cfg.n_heads * d, cfg.dim, bias=False, device=device, dtype=dtype)]
        )
        self.norm_q = ops.RMSNorm(d, eps=QK_NORM_EPS, device=device, dtype=dtype)
        self.norm_k = ops.RMSNorm(d, eps=QK_NORM_EPS, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape
        d = self.head_dim
        q = apply_rope(self.norm_q(self.to_q(x).view(b, length, self.heads, d).float()).transpose(1, 2), pe)
        k = apply_rope(
            self.norm_k(self.to_k(x).view(b, length, self.kv_heads, d).float()).transpose(1, 2), pe
        )
        v = self.to_v(x).view(b, length, self.kv_heads, d).transpose(1, 2)
        q, k = q.to(v.dtype), k.to(v.dtype)
        if self.heads != self.kv_heads:
            rep = self.heads // self.kv_heads
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out: torch.Tensor = self.to_out[0](attend_heads(None, q, k, v, 0, "self"))
        return out


class FunBlock(nn.Module):
    """A modulated block over the control's tokens; ``before``/``after``: the projections a
    control block has (a plain refiner block of the first release has neither)."""

    def __init__(
        self, cfg: NextDiTConfig, *, before: bool, after: bool, ops: OpSet, device: Device, dtype: DType
    ) -> None:
        super().__init__()
        dim, eps = cfg.dim, cfg.norm_eps
        self.attention = SplitAttention(cfg, ops=ops, device=device, dtype=dtype)
        self.feed_forward = FeedForward(cfg, ops=ops, device=device, dtype=dtype)
        self.attention_norm1 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.ffn_norm1 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.attention_norm2 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.ffn_norm2 = ops.RMSNorm(dim, eps=eps, device=device, dtype=dtype)
        self.adaLN_modulation = nn.Sequential(
            ops.Linear(cfg.adaln_dim, 4 * dim, bias=True, device=device, dtype=dtype)
        )
        self.before_proj = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype) if before else None
        self.after_proj = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype) if after else None

    def run(self, c: torch.Tensor, pe: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        """The block itself: attention and SwiGLU, each scaled in and gated out by ``vec``."""
        mods: torch.Tensor = self.adaLN_modulation(vec)[:, None]
        scale_msa, gate_msa, scale_mlp, gate_mlp = mods.chunk(4, dim=-1)
        c = c + gate_msa.tanh() * self.attention_norm2(
            self.attention(self.attention_norm1(c) * (1 + scale_msa), pe)
        )
        out: torch.Tensor = c + gate_mlp.tanh() * self.ffn_norm2(
            self.feed_forward(self.ffn_norm1(c) * (1 + scale_mlp))
        )
        return out

    def forward(
        self, c: torch.Tensor, x: torch.Tensor, pe: torch.Tensor, vec: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A control block: (the hint it gives, the control's next state); ``x`` the base
        network's picture tokens the first block adds to the control's."""
        if self.before_proj is not None:
            c = self.before_proj(c) + x
        c = self.run(c, pe, vec)
        assert self.after_proj is not None
        hint: torch.Tensor = self.after_proj(c)
        return hint, c
