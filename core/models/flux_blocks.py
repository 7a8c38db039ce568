"""Building blocks of the Flux transformer (and of Chroma, which reuses them without their own
modulation layers), named as in Black Forest Labs' release: ``img_attn.qkv``,
``img_attn.norm.query_norm.scale``, ``img_mod.lin``, ``linear1``/``linear2``, ``modulation.lin``.

Rotary position embedding: each of the three id axes (index, row, column) gets ``axes_dim[i]``
channels of the head; channel pairs (2j, 2j+1) are rotated by ``pos * theta ** (-2j / axes_dim[i])``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from core.models.patches import AttentionRoute, attend_heads
from core.ops.layers import OpSet, cast_to

Device = torch.device | None
DType = torch.dtype | None


class Mod(NamedTuple):
    """One shift/scale/gate triple, each (B, 1, hidden)."""

    shift: torch.Tensor
    scale: torch.Tensor
    gate: torch.Tensor

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return (1 + self.scale) * x + self.shift


#: Device types without float64 (Apple's MPS, Intel's XPU): the angles are computed on the CPU.
NO_FLOAT64 = frozenset({"mps", "xpu"})


def rope_device(device: torch.device) -> torch.device:
    """Where :func:`rope` computes for ids on ``device``: there, unless it has no float64 (then on
    the CPU and the result is moved, as ComfyUI does for MPS, XPU and DirectML)."""
    return torch.device("cpu") if device.type in NO_FLOAT64 else device


def rope(ids: torch.Tensor, axes_dim: tuple[int, ...], theta: float) -> torch.Tensor:
    """Rotation angles for position ids (B, L, n_axes) -> (B, 1, L, head_dim/2, 2) as (cos, sin),
    computed in float64 (see :func:`rope_device`) and returned in float32 on ``ids``' device."""
    where = rope_device(ids.device)
    pos = ids.to(where)
    angles = []
    for i, dim in enumerate(axes_dim):
        exponent = torch.arange(0, dim, 2, dtype=torch.float64, device=where) / dim
        freqs = 1.0 / (theta**exponent)
        angles.append(pos[..., i].to(torch.float64).unsqueeze(-1) * freqs)
    angle = torch.cat(angles, dim=-1)
    out = torch.stack((torch.cos(angle), torch.sin(angle)), dim=-1).float().unsqueeze(1)
    return out.to(ids.device)


def apply_rope(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent channel pairs of ``x`` (B, H, L, D) by the angles ``pe`` from :func:`rope`."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos, sin = pe[..., 0], pe[..., 1]
    even, odd = pairs[..., 0], pairs[..., 1]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.reshape(x.shape).type_as(x)


def rope_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pe: torch.Tensor,
    mask: torch.Tensor | None = None,
    route: AttentionRoute | None = None,
) -> torch.Tensor:
    """Joint attention on (B, H, L, D) with rotary embedding -> (B, L, H*D); ``route``: the
    forward's attention patches at this block (None: none), which see q and k rotated. Without
    patches the rotated q and k are freed as soon as the attention is computed, before its output
    is laid out (one allocation less at the block's peak)."""
    if route is not None:
        return attend_heads(route, apply_rope(q, pe), apply_rope(k, pe), v, 0, "joint", mask)
    out = F.scaled_dot_product_attention(apply_rope(q, pe), apply_rope(k, pe), v, attn_mask=mask)
    b, h, length, d = out.shape
    return out.transpose(1, 2).reshape(b, length, h * d)


class ScaleRMSNorm(nn.Module):
    """RMS norm whose weight is called ``scale`` (BFL's naming); computed in float32, eps 1e-6."""

    def __init__(self, dim: int, *, device: Device, dtype: DType) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=1e-6).to(x.dtype)
        scale = cast_to(self.scale, normed)
        assert scale is not None
        return normed * scale


class QKNorm(nn.Module):
    def __init__(self, head_dim: int, *, device: Device, dtype: DType) -> None:
        super().__init__()
        self.query_norm = ScaleRMSNorm(head_dim, device=device, dtype=dtype)
        self.key_norm = ScaleRMSNorm(head_dim, device=device, dtype=dtype)


class MLPEmbedder(nn.Module):
    """``in_layer`` -> SiLU -> ``out_layer`` (FLUX.2's without biases)."""

    def __init__(
        self, in_dim: int, hidden: int, *, ops: OpSet, device: Device, dtype: DType, bias: bool = True
    ) -> None:
        super().__init__()
        self.in_layer = ops.Linear(in_dim, hidden, bias=bias, device=device, dtype=dtype)
        self.out_layer = ops.Linear(hidden, hidden, bias=bias, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.out_layer(F.silu(self.in_layer(x)))
        return out


class Modulation(nn.Module):
    """``lin`` of SiLU(vec) split into ``triples`` shift/scale/gate triples (FLUX.2's without a bias,
    one shared by all blocks of a kind)."""

    def __init__(
        self, hidden: int, triples: int, *, ops: OpSet, device: Device, dtype: DType, bias: bool = True
    ) -> None:
        super().__init__()
        self.triples = triples
        self.lin = ops.Linear(hidden, 3 * triples * hidden, bias=bias, device=device, dtype=dtype)

    def forward(self, vec: torch.Tensor) -> list[Mod]:
        chunks = self.lin(F.silu(vec))[:, None, :].chunk(3 * self.triples, dim=-1)
        return [Mod(*chunks[3 * i : 3 * i + 3]) for i in range(self.triples)]


class SelfAttention(nn.Module):
    def __init__(
        self, dim: int, heads: int, qkv_bias: bool, *, ops: OpSet, device: Device, dtype: DType
    ) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = ops.Linear(dim, dim * 3, bias=qkv_bias, device=device, dtype=dtype)
        self.norm = QKNorm(dim // heads, device=device, dtype=dtype)
        self.proj = ops.Linear(dim, dim, bias=True, device=device, dtype=dtype)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return split_qkv(self.qkv(x), self.heads, self.norm)


def split_qkv(qkv: torch.Tensor, heads: int, norm: QKNorm) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, L, 3*H*D) -> q, k, v each (B, H, L, D); q and k RMS-normed per head."""
    b, length, width = qkv.shape
    q, k, v = qkv.view(b, length, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4).unbind(0)
    return norm.query_norm(q).to(v), norm.key_norm(k).to(v), v


def gelu_mlp(hidden: int, mlp_hidden: int, *, ops: OpSet, device: Device, dtype: DType) -> nn.Sequential:
    return nn.Sequential(
        ops.Linear(hidden, mlp_hidden, bias=True, device=device, dtype=dtype),
        nn.GELU(approximate="tanh"),
        ops.Linear(mlp_hidden, hidden, bias=True, device=device, dtype=dtype),
    )


class DoubleStreamBlock(nn.Module):
    """Separate weights for image and text tokens, one joint attention over [text, image].

    ``mods`` for :meth:`forward` are (img attention, img MLP, txt attention, txt MLP); Flux gets them
    from the block's own ``img_mod``/``txt_mod`` (:meth:`modulations`), Chroma from its approximator.
    """

    def __init__(
        self,
        hidden: int,
        heads: int,
        mlp_ratio: float,
        qkv_bias: bool,
        *,
        modulation: bool,
        ops: OpSet,
        device: Device,
        dtype: DType,
    ) -> None:
        super().__init__()
        self.heads = heads
        mlp_hidden = int(hidden * mlp_ratio)

        def norm() -> nn.LayerNorm:
            return ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, device=device, dtype=dtype)

        self.img_mod: Modulation | None = None
        self.txt_mod: Modulation | None = None
        if modulation:
            self.img_mod = Modulation(hidden, 2, ops=ops, device=device, dtype=dtype)
        self.img_norm1 = norm()
        self.img_attn = SelfAttention(hidden, heads, qkv_bias, ops=ops, device=device, dtype=dtype)
        self.img_norm2 = norm()
        self.img_mlp = gelu_mlp(hidden, mlp_hidden, ops=ops, device=device, dtype=dtype)
        if modulation:
            self.txt_mod = Modulation(hidden, 2, ops=ops, device=device, dtype=dtype)
        self.txt_norm1 = norm()
        self.txt_attn = SelfAttention(hidden, heads, qkv_bias, ops=ops, device=device, dtype=dtype)
        self.txt_norm2 = norm()
        self.txt_mlp = gelu_mlp(hidden, mlp_hidden, ops=ops, device=device, dtype=dtype)

    def modulations(self, vec: torch.Tensor) -> tuple[Mod, Mod, Mod, Mod]:
        assert self.img_mod is not None and self.txt_mod is not None, "built without modulation"
        img1, img2 = self.img_mod(vec)
        txt1, txt2 = self.txt_mod(vec)
        return img1, img2, txt1, txt2

    def forward(
        self,
        img: torch.Tensor,
        txt: torch.Tensor,
        pe: torch.Tensor,
        mods: tuple[Mod, Mod, Mod, Mod],
        mask: torch.Tensor | None = None,
        route: AttentionRoute | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``route``: the attention patches of this block's site (the joint attention over
        [text, picture] tokens, layer 0)."""
        img1, img2, txt1, txt2 = mods
        iq, ik, iv = self.img_attn.qkv_heads(img1.apply(self.img_norm1(img)))
        tq, tk, tv = self.txt_attn.qkv_heads(txt1.apply(self.txt_norm1(txt)))
        attn = rope_attention(
            torch.cat((tq, iq), dim=2),
            torch.cat((tk, ik), dim=2),
            torch.cat((tv, iv), dim=2),
            pe,
            mask,
            route,
        )  # the joined q, k, v are temporaries: freed before the MLPs
        n_txt = txt.shape[1]
        img = img + img1.gate * self.img_attn.proj(attn[:, n_txt:])
        img = img + img2.gate * self.img_mlp(img2.apply(self.img_norm2(img)))
        txt = txt + txt1.gate * self.txt_attn.proj(attn[:, :n_txt])
        txt = txt + txt2.gate * self.txt_mlp(txt2.apply(self.txt_norm2(txt)))
        return img, txt


class SingleStreamBlock(nn.Module):
    """Shared weights for all tokens; ``linear1`` = [q, k, v, mlp in], ``linear2`` = [attn, mlp] -> out."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        mlp_ratio: float,
        *,
        modulation: bool,
        ops: OpSet,
        device: Device,
        dtype: DType,
    ) -> None:
        super().__init__()
        self.heads = heads
        self.hidden = hidden
        self.mlp_hidden = int(hidden * mlp_ratio)
        self.linear1 = ops.Linear(hidden, 3 * hidden + self.mlp_hidden, bias=True, device=device, dtype=dtype)
        self.linear2 = ops.Linear(hidden + self.mlp_hidden, hidden, bias=True, device=device, dtype=dtype)
        self.norm = QKNorm(hidden // heads, device=device, dtype=dtype)
        self.pre_norm = ops.LayerNorm(hidden, elementwise_affine=False, eps=1e-6, device=device, dtype=dtype)
        self.modulation: Modulation | None = None
        if modulation:
            self.modulation = Modulation(hidden, 1, ops=ops, device=device, dtype=dtype)

    def modulations(self, vec: torch.Tensor) -> Mod:
        assert self.modulation is not None, "built without modulation"
        mod: Mod = self.modulation(vec)[0]
        return mod

    def forward(
        self,
        x: torch.Tensor,
        pe: torch.Tensor,
        mod: Mod,
        mask: torch.Tensor | None = None,
        route: AttentionRoute | None = None,
    ) -> torch.Tensor:
        qkv, mlp = self.linear1(mod.apply(self.pre_norm(x))).split((3 * self.hidden, self.mlp_hidden), dim=-1)
        q, k, v = split_qkv(qkv, self.heads, self.norm)
        attn = rope_attention(q, k, v, pe, mask, route)
        out: torch.Tensor = self.linear2(torch.cat((attn, F.gelu(mlp, approximate="tanh")), dim=2))
        return x + mod.gate * out


class LastLayer(nn.Module):
    """``norm_final`` -> modulation -> ``linear``; Flux has its own ``adaLN_modulation``."""

    def __init__(
        self, hidden: int, out_channels: int, *, modulation: bool, ops: OpSet, device: Device, dtype: DType
    ) -> None:
        super().__init__()
        self.norm_final = ops.LayerNorm(
            hidden, elementwise_affine=False, eps=1e-6, device=device, dtype=dtype
        )
        self.linear = ops.Linear(hidden, out_channels, bias=True, device=device, dtype=dtype)
        self.adaLN_modulation: nn.Sequential | None = None
        if modulation:
            self.adaLN_modulation = nn.Sequential(
                nn.SiLU(), ops.Linear(hidden, 2 * hidden, bias=True, device=device, dtype=dtype)
            )

    def shift_scale(self, vec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.adaLN_modulation is not None, "built without modulation"
        shift, scale = self.adaLN_modulation(vec)[:, None, :].chunk(2, dim=-1)
        return shift, scale

    def forward(self, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear((1 + scale) * self.norm_final(x) + shift)
        return out


def stream_blocks(
    config: Any, *, modulation: bool, ops: OpSet, device: torch.device | None, dtype: torch.dtype | None
) -> tuple[nn.ModuleList, nn.ModuleList, LastLayer]:
    """The double-stream blocks, single-stream blocks and final layer of a Flux-style transformer
    (Flux modulates inside each block; Chroma feeds precomputed modulation instead)."""
    hidden = config.hidden_size
    double = nn.ModuleList(
        DoubleStreamBlock(
            hidden, config.num_heads, config.mlp_ratio, config.qkv_bias, modulation=modulation,
            ops=ops, device=device, dtype=dtype,
        )
        for _ in range(config.depth)
    )  # fmt: skip
    single = nn.ModuleList(
        SingleStreamBlock(
            hidden,
            config.num_heads,
            config.mlp_ratio,
            modulation=modulation,
            ops=ops,
            device=device,
            dtype=dtype,
        )
        for _ in range(config.depth_single_blocks)
    )
    final = LastLayer(hidden, config.out_channels, modulation=modulation, ops=ops, device=device, dtype=dtype)
    return double, single, final
