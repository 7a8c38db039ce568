"""The decoder-LLM text encoder network, built from ``core.ops`` layers.

One network covers Llama-3.1, Mistral-3, Qwen2.5 (text), Qwen3, Gemma-2 and Gemma-3; a
:class:`LlmConfig` says which pieces a family has. Its module keys are the transformers layout
(``model.embed_tokens.weight``, ``model.layers.N.self_attn.q_proj.weight``, ``model.norm.weight``),
which is also the layout of Comfy-Org's ``text_encoders/*.safetensors`` repacks, so those load
with no key conversion.

Numerics follow transformers and ComfyUI: norms compute in float32 (Gemma's weight is ``1 + w``),
queries/keys take RoPE in the compute dtype, attention is causal with padded keys masked, and the
compute dtype (float32 by default, as ComfyUI encodes text) is the input's throughout.

Hidden-state taps use transformers' ``hidden_states`` numbering: tap ``k`` is the stream after
``k`` layers (0: the embeddings; ``num_layers``: after the final norm); a negative tap counts from
the end (-1 final-normed, -2 the output of the second-to-last layer, ComfyUI's ``layer_idx=-2``).
Layers past the deepest tap are not run: in a causal stack they cannot change an earlier output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.models.llm.config import LlmConfig, RopeScaling
from core.models.llm.norm import rms_norm
from core.models.llm.rope import apply_rope, mrope_tables, rope_tables
from core.models.llm.vision import QwenVisionTower
from core.ops.layers import OpSet, default_ops

Tables = dict[tuple[float, RopeScaling | None], tuple[torch.Tensor, torch.Tensor]]


class LlmAttention(nn.Module):
    def __init__(self, c: LlmConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.c = c
        q_out, kv_out = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
        self.q_proj = ops.Linear(c.hidden_size, q_out, bias=c.qkv_bias, device=device, dtype=dtype)
        self.k_proj = ops.Linear(c.hidden_size, kv_out, bias=c.qkv_bias, device=device, dtype=dtype)
        self.v_proj = ops.Linear(c.hidden_size, kv_out, bias=c.qkv_bias, device=device, dtype=dtype)
        self.o_proj = ops.Linear(q_out, c.hidden_size, bias=False, device=device, dtype=dtype)
        if c.qk_norm:
            self.q_norm = ops.RMSNorm(c.head_dim, eps=c.rms_norm_eps, device=device, dtype=dtype)
            self.k_norm = ops.RMSNorm(c.head_dim, eps=c.rms_norm_eps, device=device, dtype=dtype)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor
    ) -> torch.Tensor:
        """x (B, L, D); ``mask`` additive (B, 1, L, L) in x's dtype."""
        c = self.c
        b, length, _ = x.shape
        q = self.q_proj(x).view(b, length, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, length, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, length, c.num_kv_heads, c.head_dim).transpose(1, 2)
        if c.qk_norm:
            q = rms_norm(self.q_norm, q, c.gemma)
            k = rms_norm(self.k_norm, k, c.gemma)
        q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        groups = c.num_heads // c.num_kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        if c.attn_softcap is None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=c.attention_scale)
        else:  # Gemma-2's soft-capped logits: tanh(s / cap) * cap before the mask
            scores = (q @ k.transpose(-1, -2)) * c.attention_scale
            scores = torch.tanh(scores / c.attn_softcap) * c.attn_softcap + mask
            out = torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
        result: torch.Tensor = self.o_proj(out.transpose(1, 2).reshape(b, length, -1))
        return result


class LlmMlp(nn.Module):
    def __init__(self, c: LlmConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.gelu = c.activation == "gelu_tanh"
        self.gate_proj = ops.Linear(
            c.hidden_size, c.intermediate_size, bias=False, device=device, dtype=dtype
        )
        self.up_proj = ops.Linear(c.hidden_size, c.intermediate_size, bias=False, device=device, dtype=dtype)
        self.down_proj = ops.Linear(
            c.intermediate_size, c.hidden_size, bias=False, device=device, dtype=dtype
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.gate_proj(x)
        act = F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)
        out: torch.Tensor = self.down_proj(act * self.up_proj(x))
        return out


class LlmLayer(nn.Module):
    """Pre-norm block; Gemma's adds a norm after attention and around the MLP ("sandwich")."""

    def __init__(self, c: LlmConfig, index: int, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.c, self.index = c, index
        self.self_attn = LlmAttention(c, ops, device, dtype)
        self.mlp = LlmMlp(c, ops, device, dtype)
        norms = ["input_layernorm", "post_attention_layernorm"]
        if c.gemma:
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
        for name in norms:
            setattr(self, name, ops.RMSNorm(c.hidden_size, eps=c.rms_norm_eps, device=device, dtype=dtype))

    def _norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        layer = getattr(self, name)
        assert isinstance(layer, nn.RMSNorm)
        return rms_norm(layer, x, self.c.gemma)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor
    ) -> torch.Tensor:
        h = self.self_attn(self._norm("input_layernorm", x), rope, mask)
        if self.c.gemma:
            x = x + self._norm("post_attention_layernorm", h)
            h = self.mlp(self._norm("pre_feedforward_layernorm", x))
            return x + self._norm("post_feedforward_layernorm", h)
        x = x + h
        out: torch.Tensor = x + self.mlp(self._norm("post_attention_layernorm", x))
        return out


class LlmBackbone(nn.Module):
    def __init__(self, c: LlmConfig, ops: OpSet, device: Any, dtype: Any) -> None:
        super().__init__()
        self.embed_tokens = ops.Embedding(c.vocab_size, c.hidden_size, device=device, dtype=dtype)
        self.layers = nn.ModuleList(LlmLayer(c, i, ops, device, dtype) for i in range(c.num_layers))
        self.norm = ops.RMSNorm(c.hidden_size, eps=c.rms_norm_eps, device=device, dtype=dtype)


def _compute_dtype(weight: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return weight.dtype if weight.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float32


def attention_mask(
    keep: torch.Tensor | None, batch: int, length: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Additive (B, 1, L, L) mask: causal, plus padded keys (``keep`` (B, L), 1 = real token)
    masked, with ComfyUI's ``finfo.min / 4`` (so the two added stay finite)."""
    low = torch.finfo(dtype).min / 4
    causal = torch.full((length, length), low, dtype=dtype, device=device).triu_(1)
    mask = causal[None, None].expand(batch, 1, length, length)
    if keep is not None:
        pad = (keep.to(device=device) == 0)[:, None, None, :]
        mask = mask + pad.to(dtype) * low
    return mask


def sliding_mask(mask: torch.Tensor, window: int) -> torch.Tensor:
    """``mask`` with keys ``window`` or more positions back masked too."""
    length = mask.shape[-1]
    if length <= window:
        return mask
    low = torch.finfo(mask.dtype).min / 4
    far = torch.full((length, length), low, dtype=mask.dtype, device=mask.device).tril_(-window)
    return mask + far


class LlmTextModel(nn.Module):
    """A decoder-only LLM as a text encoder: token ids -> hidden states at the requested taps."""

    def __init__(
        self,
        config: LlmConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.model = LlmBackbone(config, ops, device, dtype)
        if config.vision is not None:
            self.visual = QwenVisionTower(config.vision, ops=ops, device=device, dtype=dtype)

    def resolve_taps(self, taps: Sequence[int]) -> tuple[int, ...]:
        n = self.config.num_layers
        out = tuple(t if t >= 0 else n + 1 + t for t in taps)
        bad = [t for t, r in zip(taps, out, strict=True) if not 0 <= r <= n]
        if bad:
            raise ValueError(f"hidden-state taps {bad} are outside 0..{n} (or -{n + 1}..-1) for {n} layers")
        return out

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask_: torch.Tensor | None = None,
        *,
        taps: Sequence[int] = (-1,),
        dtype: torch.dtype | None = None,
        inserts: Sequence[tuple[int, torch.Tensor]] = (),
        positions: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        """Hidden states (B, L, hidden) at each tap, in the compute ``dtype`` (default: the weights'
        dtype; float32 for storage dtypes torch cannot compute in). ``attention_mask_`` (B, L):
        1 = real token, 0 = padding (masked as keys). ``inserts``: (start, vectors (n, hidden))
        put in place of the token embeddings from ``start`` on, in every row (a picture's tokens
        from the vision tower). ``positions``: (3, L) M-RoPE positions (time, row, column) where
        the config has M-RoPE sections; None: 0, 1, 2, ... on every axis."""
        c, m = self.config, self.model
        wanted = self.resolve_taps(taps)
        dt = _compute_dtype(m.embed_tokens.weight, dtype)
        b, length = input_ids.shape
        x: torch.Tensor = m.embed_tokens(input_ids, out_dtype=dt)
        if inserts:
            x = x.clone()
            for start, vectors in inserts:
                x[:, start : start + vectors.shape[0]] = vectors.to(device=x.device, dtype=x.dtype)
        if c.gemma:  # Gemma scales its embeddings by sqrt(width) (ComfyUI: a Python float)
            x = x * c.hidden_size**0.5
        mask = attention_mask(attention_mask_, b, length, dt, x.device)
        if positions is not None and c.mrope_sections is None:
            raise ValueError("3D positions need a network with M-RoPE sections (Qwen2.5-VL)")
        if positions is None:
            positions = torch.arange(length, device=x.device)
        tables: Tables = {}
        found: dict[int, torch.Tensor] = {0: x} if 0 in wanted else {}
        deepest = max(wanted)
        for i in range(min(deepest, c.num_layers)):
            key = (c.layer_theta(i), c.layer_scaling(i))
            if key not in tables:
                tables[key] = (
                    mrope_tables(positions.to(x.device), c.head_dim, key[0], c.mrope_sections)
                    if positions.ndim == 2 and c.mrope_sections is not None
                    else rope_tables(positions, c.head_dim, *key)
                )
            layer_mask = sliding_mask(mask, c.sliding_window) if c.sliding(i) and c.sliding_window else mask
            x = m.layers[i](x, tables[key], layer_mask)
            if i + 1 in wanted and i + 1 < c.num_layers:
                found[i + 1] = x
        if c.num_layers in wanted:
            found[c.num_layers] = rms_norm(m.norm, x, c.gemma)
        return [found[t] for t in wanted]
