"""Building blocks of the SD3 / SD3.5 MMDiT, named as in the original release.

One joint block holds a ``context_block`` (text tokens) and an ``x_block`` (image tokens); both run
one attention over the concatenated sequence. SD3.5 medium adds a second, image-only attention
(``x_block.attn2``) in its first layers; SD3.5 adds RMS qk-norm (``ln_q`` / ``ln_k``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from core.models.patches import AttentionRoute, attend_heads
from core.ops.layers import OpSet


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: ``x * (1 + scale) + shift`` with per-sample (B, D) shift and scale."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class Mlp(nn.Module):
    def __init__(
        self, dim: int, hidden: int, *, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
    ) -> None:
        super().__init__()
        self.fc1 = ops.Linear(dim, hidden, bias=True, device=device, dtype=dtype)
        self.fc2 = ops.Linear(hidden, dim, bias=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(F.gelu(self.fc1(x), approximate="tanh"))
        return out


class SelfAttention(nn.Module):
    """Fused ``qkv`` projection, optional per-head RMS norm of q and k, output ``proj``."""

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        qk_norm: bool,
        pre_only: bool,
        ops: OpSet,
        device: torch.device | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = ops.Linear(dim, dim * 3, bias=True, device=device, dtype=dtype)
        self.ln_q: nn.Module | None = None
        self.ln_k: nn.Module | None = None
        if qk_norm:
            self.ln_q = ops.RMSNorm(
                self.head_dim, eps=1e-6, elementwise_affine=True, device=device, dtype=dtype
            )
            self.ln_k = ops.RMSNorm(
                self.head_dim, eps=1e-6, elementwise_affine=True, device=device, dtype=dtype
            )
        self.proj: nn.Module | None = None
        if not pre_only:
            self.proj = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, L, D) -> q, k, v each (B, heads, L, head_dim), q and k normed when configured."""
        b, length, _ = x.shape
        q, k, v = self.qkv(x).view(b, length, 3, self.heads, self.head_dim).unbind(2)
        if self.ln_q is not None and self.ln_k is not None:
            q = self.ln_q(q)
            k = self.ln_k(k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def out(self, x: torch.Tensor) -> torch.Tensor:
        assert self.proj is not None, "a pre-only attention has no output projection"
        out: torch.Tensor = self.proj(x)
        return out


class DismantledBlock(nn.Module):
    """One stream (text or image) of a joint block.

    Modulation chunks, in order: shift/scale (pre-only); shift/scale/gate for attention and for the
    MLP (normal); the same plus shift/scale/gate of ``attn2`` (dual attention).
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        mlp_ratio: float,
        *,
        qk_norm: bool,
        pre_only: bool,
        dual_attention: bool,
        ops: OpSet,
        device: torch.device | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.pre_only = pre_only
        self.norm1 = ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, device=device, dtype=dtype)
        self.attn = SelfAttention(
            hidden, heads, qk_norm=qk_norm, pre_only=pre_only, ops=ops, device=device, dtype=dtype
        )
        self.attn2: SelfAttention | None = None
        if dual_attention:
            self.attn2 = SelfAttention(
                hidden, heads, qk_norm=qk_norm, pre_only=False, ops=ops, device=device, dtype=dtype
            )
        self.norm2: nn.Module | None = None
        self.mlp: Mlp | None = None
        if not pre_only:
            self.norm2 = ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, device=device, dtype=dtype)
            self.mlp = Mlp(hidden, int(hidden * mlp_ratio), ops=ops, device=device, dtype=dtype)
        chunks = 2 if pre_only else (9 if dual_attention else 6)
        self.adaLN_modulation = nn.Sequential(
            nn.SiLU(), ops.Linear(hidden, chunks * hidden, bias=True, device=device, dtype=dtype)
        )

    def modulation(self, c: torch.Tensor) -> list[torch.Tensor]:
        chunks = 2 if self.pre_only else (9 if self.attn2 is not None else 6)
        return list(self.adaLN_modulation(c).chunk(chunks, dim=1))

    def post_attention(
        self,
        x: torch.Tensor,
        normed: torch.Tensor,
        attn: torch.Tensor,
        mods: list[torch.Tensor],
        route: AttentionRoute | None = None,
    ) -> torch.Tensor:
        """Residual updates after the joint attention (and the image-only ``attn2``, which reads the
        same ``normed = norm1(x)`` as the joint attention did; ``route``'s patches see it as the
        site's self-attention, layer 1)."""
        assert self.norm2 is not None and self.mlp is not None
        _, _, gate_msa, shift_mlp, scale_mlp, gate_mlp = mods[:6]
        x = x + gate_msa.unsqueeze(1) * self.attn.out(attn)
        if self.attn2 is not None:
            shift2, scale2, gate2 = mods[6:9]
            q, k, v = self.attn2.qkv_heads(modulate(normed, shift2, scale2))
            x = x + gate2.unsqueeze(1) * self.attn2.out(attend_heads(route, q, k, v, 1, "self"))
        mlp_out: torch.Tensor = self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x + gate_mlp.unsqueeze(1) * mlp_out


class JointBlock(nn.Module):
    def __init__(
        self,
        hidden: int,
        heads: int,
        mlp_ratio: float,
        *,
        qk_norm: bool,
        pre_only: bool,
        dual_attention: bool,
        ops: OpSet,
        device: torch.device | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.context_block = DismantledBlock(
            hidden,
            heads,
            mlp_ratio,
            qk_norm=qk_norm,
            pre_only=pre_only,
            dual_attention=False,
            ops=ops,
            device=device,
            dtype=dtype,
        )
        self.x_block = DismantledBlock(
            hidden,
            heads,
            mlp_ratio,
            qk_norm=qk_norm,
            pre_only=False,
            dual_attention=dual_attention,
            ops=ops,
            device=device,
            dtype=dtype,
        )

    def forward(
        self, context: torch.Tensor, x: torch.Tensor, c: torch.Tensor, route: AttentionRoute | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Returns the updated (context, x); context is None after the last (pre-only) block.
        ``route``: the attention patches of this block's site (the joint attention over [text,
        picture] tokens is layer 0, SD3.5 medium's picture-only ``attn2`` layer 1)."""
        ctx_mods = self.context_block.modulation(c)
        x_mods = self.x_block.modulation(c)
        ctx_normed = self.context_block.norm1(context)
        x_normed = self.x_block.norm1(x)
        cq, ck, cv = self.context_block.attn.qkv_heads(modulate(ctx_normed, ctx_mods[0], ctx_mods[1]))
        xq, xk, xv = self.x_block.attn.qkv_heads(modulate(x_normed, x_mods[0], x_mods[1]))
        joint = attend_heads(
            route,
            torch.cat((cq, xq), dim=2),
            torch.cat((ck, xk), dim=2),
            torch.cat((cv, xv), dim=2),
            0,
            "joint",
        )  # the joined q, k, v are temporaries: freed before the MLPs
        n_ctx = context.shape[1]
        x = self.x_block.post_attention(x, x_normed, joint[:, n_ctx:], x_mods, route)
        if self.context_block.pre_only:
            return None, x
        return self.context_block.post_attention(context, ctx_normed, joint[:, :n_ctx], ctx_mods), x


class FinalLayer(nn.Module):
    def __init__(
        self,
        hidden: int,
        out_features: int,
        *,
        ops: OpSet,
        device: torch.device | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.norm_final = ops.LayerNorm(
            hidden, elementwise_affine=False, eps=1e-6, device=device, dtype=dtype
        )
        self.linear = ops.Linear(hidden, out_features, bias=True, device=device, dtype=dtype)
        self.adaLN_modulation = nn.Sequential(
            nn.SiLU(), ops.Linear(hidden, 2 * hidden, bias=True, device=device, dtype=dtype)
        )

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        out: torch.Tensor = self.linear(modulate(self.norm_final(x), shift, scale))
        return out


class Embedder(nn.Module):
    """``mlp.0`` -> SiLU -> ``mlp.2`` (timestep and pooled-text embedders)."""

    def __init__(
        self,
        in_features: int,
        hidden: int,
        *,
        ops: OpSet,
        device: torch.device | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            ops.Linear(in_features, hidden, bias=True, device=device, dtype=dtype),
            nn.SiLU(),
            ops.Linear(hidden, hidden, bias=True, device=device, dtype=dtype),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.mlp(x)
        return out


class PatchEmbed(nn.Module):
    def __init__(
        self,
        in_channels: int,
        hidden: int,
        patch_size: int,
        *,
        ops: OpSet,
        device: torch.device | None,
        dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        self.proj = ops.Conv2d(
            in_channels, hidden, patch_size, stride=patch_size, bias=True, device=device, dtype=dtype
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, H/p * W/p, hidden)."""
        out: torch.Tensor = self.proj(x)
        return out.flatten(2).transpose(1, 2)
