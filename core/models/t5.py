"""T5 encoders: T5 v1.1 XXL (SD3, Flux, PixArt, LTXV...), the original T5-base (Stable Audio) and
UMT5-XXL (Wan), in the transformers ``T5EncoderModel`` / ``UMT5EncoderModel`` state-dict layout
(``shared.weight``, ``encoder.block.N.layer.0.SelfAttention.q.weight``, ...,
``encoder.final_layer_norm.weight``).

T5 specifics: RMS norm without bias, no attention scaling, a learned relative position bias (in
block 0 and shared by all blocks for T5; in every block for UMT5), bias-free linears.

Numerics: the residual stream is always kept in float32 and every sublayer's output is added to it
there; norms run in float32. Only the linears and attention run in the compute dtype. In float16
the feed-forward gate product and ``wo`` run in float32 (transformers keeps ``wo`` in float32 for
the same reason) and any sublayer output that overflowed is clamped as transformers does, so fp16
XXL encoders do not turn into inf/NaN.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import ModelMismatchError
from core.ops.layers import OpSet, default_ops

FeedForward = Literal["gated-gelu", "relu"]

ALIAS_KEYS: Final[Mapping[str, str]] = {"encoder.embed_tokens.weight": "shared.weight"}
"""Tied duplicates real files carry (alias -> the key this module keeps). When loading, an alias is
dropped if its target is present (shapes must agree) and renamed to the target otherwise."""

_BLOCK_KEY = re.compile(r"encoder\.block\.(\d+)\.")


@dataclass(frozen=True)
class T5Config:
    vocab_size: int = 32128
    d_model: int = 4096
    d_kv: int = 64
    d_ff: int = 10240
    num_layers: int = 24
    num_heads: int = 64
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    feed_forward: FeedForward = "gated-gelu"
    per_layer_relative_bias: bool = False
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        sizes = (self.vocab_size, self.d_model, self.d_kv, self.d_ff, self.num_layers, self.num_heads)
        if min(sizes) < 1 or self.relative_attention_num_buckets < 4:
            raise ValueError(f"invalid T5 config {self}: sizes must be positive, at least 4 buckets")
        if self.feed_forward not in ("gated-gelu", "relu"):
            raise ValueError(f"unknown T5 feed-forward {self.feed_forward!r}: use 'gated-gelu' or 'relu'")

    @classmethod
    def t5_xxl(cls) -> T5Config:
        """google/t5-v1_1-xxl encoder (gated GELU, 24 blocks, d_ff 10240)."""
        return cls()

    @classmethod
    def t5_base(cls) -> T5Config:
        """The original (v1.0) google-t5/t5-base encoder that Stable Audio uses (ComfyUI's
        ``t5_config_base.json``): ReLU feed-forward, d_ff 3072, 12 blocks of width 768."""
        return cls(d_model=768, d_ff=3072, num_layers=12, num_heads=12, feed_forward="relu")

    @classmethod
    def umt5_xxl(cls) -> T5Config:
        """google/umt5-xxl encoder (Wan): T5-XXL shapes, 256384 tokens, a relative bias per block."""
        return cls(vocab_size=256384, per_layer_relative_bias=True)

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> T5Config:
        """The config whose state dict has these (transformers layout) shapes. ``max_distance``
        (128) and the gated activation (GELU) are not visible in shapes."""
        p = "encoder.block.0.layer."
        try:
            vocab, d_model = shapes.get("shared.weight") or shapes["encoder.embed_tokens.weight"]
            inner = shapes[p + "0.SelfAttention.q.weight"][0]
            buckets, heads = shapes[p + "0.SelfAttention.relative_attention_bias.weight"]
            gated = p + "1.DenseReluDense.wi_0.weight" in shapes
            d_ff = shapes[p + ("1.DenseReluDense.wi_0.weight" if gated else "1.DenseReluDense.wi.weight")][0]
        except (KeyError, ValueError) as exc:
            raise ModelMismatchError(
                "These tensors are not a T5 encoder in the transformers layout",
                why=f"a key or shape is missing or wrong: {exc}",
                fix="check the key prefix (ComfyUI files nest it under text_encoders.t5xxl.transformer.)",
            ) from exc
        blocks = 1 + max(int(m.group(1)) for k in shapes if (m := _BLOCK_KEY.match(k)))
        return cls(
            vocab_size=vocab,
            d_model=d_model,
            d_kv=inner // heads,
            d_ff=d_ff,
            num_layers=blocks,
            num_heads=heads,
            relative_attention_num_buckets=buckets,
            feed_forward="gated-gelu" if gated else "relu",
            per_layer_relative_bias="encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"
            in shapes,
        )


def relative_position_buckets(
    length: int, num_buckets: int, max_distance: int, device: torch.device
) -> torch.Tensor:
    """Bidirectional T5 bucket (L, L) of key position minus query position: half the buckets per
    direction, exact for small distances, logarithmic up to ``max_distance``, clipped beyond."""
    positions = torch.arange(length, dtype=torch.long, device=device)
    relative = positions[None, :] - positions[:, None]
    half = num_buckets // 2
    buckets = (relative > 0).to(torch.long) * half
    distance = relative.abs()
    exact = half // 2
    # log only where distance >= exact (clamped so no log(0) reaches the integer cast)
    scaled = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far = (exact + (scaled * (half - exact)).to(torch.long)).clamp(max=half - 1)
    return buckets + torch.where(distance < exact, distance, far)


def _compute_dtype(weight: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return weight.dtype if weight.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float32


def _clamp_fp16(x: torch.Tensor) -> torch.Tensor:
    """Overflowed float16 values back to finite ones, as transformers does for T5 in fp16."""
    if x.dtype != torch.float16:
        return x
    limit = torch.finfo(torch.float16).max - 1000.0
    return x.nan_to_num(nan=0.0, posinf=limit, neginf=-limit).clamp(-limit, limit)


class T5Attention(nn.Module):
    def __init__(self, c: T5Config, has_bias: bool, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        inner = c.num_heads * c.d_kv
        self.heads = c.num_heads
        self.q = ops.Linear(c.d_model, inner, bias=False, device=device, dtype=dtype)
        self.k = ops.Linear(c.d_model, inner, bias=False, device=device, dtype=dtype)
        self.v = ops.Linear(c.d_model, inner, bias=False, device=device, dtype=dtype)
        self.o = ops.Linear(inner, c.d_model, bias=False, device=device, dtype=dtype)
        self.relative_attention_bias: nn.Embedding | None = None
        if has_bias:
            self.relative_attention_bias = ops.Embedding(
                c.relative_attention_num_buckets, c.num_heads, device=device, dtype=dtype
            )

    def position_bias(self, buckets: torch.Tensor) -> torch.Tensor:
        """(1, H, L, L) float32 bias from (L, L) bucket ids. Through the op layer, so a streamed,
        quantized (GGUF) or fp8 table is cast the way every weight is."""
        assert self.relative_attention_bias is not None
        table: torch.Tensor = self.relative_attention_bias(buckets, out_dtype=torch.float32)
        return table.permute(2, 0, 1)[None]

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x (B, L, D) in the compute dtype; ``bias`` additive (B or 1, H, L, L) in the same dtype."""
        b, length, _ = x.shape
        q, k, v = (
            t.view(b, length, self.heads, -1).transpose(1, 2) for t in (self.q(x), self.k(x), self.v(x))
        )
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)  # T5: no 1/sqrt(d)
        result: torch.Tensor = self.o(out.transpose(1, 2).reshape(b, length, -1))
        return result


class T5DenseReluDense(nn.Module):
    """Gated GELU (``wi_0``, ``wi_1``, ``wo``; T5 v1.1, UMT5) or ReLU (``wi``, ``wo``; T5 v1.0)."""

    def __init__(self, c: T5Config, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.gated = c.feed_forward == "gated-gelu"
        if self.gated:
            self.wi_0 = ops.Linear(c.d_model, c.d_ff, bias=False, device=device, dtype=dtype)
            self.wi_1 = ops.Linear(c.d_model, c.d_ff, bias=False, device=device, dtype=dtype)
        else:
            self.wi = ops.Linear(c.d_model, c.d_ff, bias=False, device=device, dtype=dtype)
        self.wo = ops.Linear(c.d_ff, c.d_model, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate: torch.Tensor = F.gelu(self.wi_0(x), approximate="tanh")
            up: torch.Tensor = self.wi_1(x)
            if x.dtype == torch.float16:  # the product and wo overflow fp16 in XXL: do them in fp32
                gate, up = gate.float(), up.float()
            h = gate * up
        else:
            h = F.relu(self.wi(x)).float() if x.dtype == torch.float16 else F.relu(self.wi(x))
        out: torch.Tensor = self.wo(h)
        return out


class T5LayerSelfAttention(nn.Module):
    def __init__(self, c: T5Config, has_bias: bool, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.SelfAttention = T5Attention(c, has_bias, ops, device, dtype)
        self.layer_norm = ops.RMSNorm(c.d_model, eps=c.layer_norm_eps, device=device, dtype=dtype)


class T5LayerFF(nn.Module):
    def __init__(self, c: T5Config, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.DenseReluDense = T5DenseReluDense(c, ops, device, dtype)
        self.layer_norm = ops.RMSNorm(c.d_model, eps=c.layer_norm_eps, device=device, dtype=dtype)


class T5Block(nn.Module):
    def __init__(self, c: T5Config, has_bias: bool, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.layer = nn.ModuleList(
            [T5LayerSelfAttention(c, has_bias, ops, device, dtype), T5LayerFF(c, ops, device, dtype)]
        )

    def sublayers(self) -> tuple[T5LayerSelfAttention, T5LayerFF]:
        attn, ff = self.layer
        assert isinstance(attn, T5LayerSelfAttention) and isinstance(ff, T5LayerFF)
        return attn, ff

    def forward(self, x: torch.Tensor, bias: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """x: the float32 residual stream; ``bias`` the additive attention bias in ``dtype``."""
        attn, ff = self.sublayers()
        h = attn.layer_norm(x).to(dtype)
        x = x + _clamp_fp16(attn.SelfAttention(h, bias)).float()
        h = ff.layer_norm(x).to(dtype)
        return x + _clamp_fp16(ff.DenseReluDense(h)).float()


class T5Stack(nn.Module):
    def __init__(self, c: T5Config, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.block = nn.ModuleList(
            T5Block(c, i == 0 or c.per_layer_relative_bias, ops, device, dtype) for i in range(c.num_layers)
        )
        self.final_layer_norm = ops.RMSNorm(c.d_model, eps=c.layer_norm_eps, device=device, dtype=dtype)


def _resolve_aliases(module: nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    for alias, target in ALIAS_KEYS.items():
        if prefix + alias not in state_dict:
            continue
        value = state_dict.pop(prefix + alias)
        kept = state_dict.setdefault(prefix + target, value)
        if tuple(kept.shape) != tuple(value.shape):
            raise ModelMismatchError(
                f"The T5 file's {alias} and {target} differ in shape ({tuple(value.shape)} vs "
                f"{tuple(kept.shape)})",
                why="they are tied copies of the same token embedding",
                fix="re-export the encoder; the file is inconsistent",
            )


class T5Encoder(nn.Module):
    """A T5 / UMT5 encoder in the transformers layout, built from ``ops`` (no random init)."""

    def __init__(
        self,
        config: T5Config,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.shared = ops.Embedding(config.vocab_size, config.d_model, device=device, dtype=dtype)
        self.encoder = T5Stack(config, ops, device, dtype)
        self.register_load_state_dict_pre_hook(_resolve_aliases)  # type: ignore[no-untyped-call]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """Last hidden state (B, L, d_model) for token ids (B, L), in the compute ``dtype`` (default:
        the weights' dtype; float32 for storage dtypes torch cannot compute in).
        ``attention_mask`` (B, L): 1 = real token, 0 = padding (keys masked out)."""
        c = self.config
        dt = _compute_dtype(self.shared.weight, dtype)
        length = input_ids.shape[1]
        x: torch.Tensor = self.shared(input_ids, out_dtype=torch.float32)
        buckets = relative_position_buckets(
            length, c.relative_attention_num_buckets, c.relative_attention_max_distance, input_ids.device
        )
        key_mask = None
        if attention_mask is not None:
            keep = attention_mask.to(device=input_ids.device, dtype=torch.bool)[:, None, None, :]
            key_mask = torch.zeros(keep.shape, device=input_ids.device).masked_fill(
                ~keep, torch.finfo(torch.float32).min
            )
        bias: torch.Tensor | None = None
        for block in self.encoder.block:
            assert isinstance(block, T5Block)
            if bias is None or c.per_layer_relative_bias:
                bias = block.sublayers()[0].SelfAttention.position_bias(buckets)
                if key_mask is not None:
                    bias = bias + key_mask
                bias = bias.clamp(min=torch.finfo(dt).min).to(dt)
            x = block(x, bias, dt)
        out: torch.Tensor = self.encoder.final_layer_norm(x)
        return out.to(dt)
