"""llama.cpp's names for decoder-LLM text encoders in GGUF files -> the transformers names
``core.models.llm`` uses (``blk.N.attn_q.weight`` -> ``model.layers.N.self_attn.q_proj.weight``).

llama.cpp's converter adds 1 to every Gemma norm weight (its RMSNorm has no ``1 + w``):
:func:`gguf_plus_one_keys` names them, and loading subtracts it again. Llama and Mistral files
(``general.architecture`` "llama") have their query/key rows permuted for llama.cpp's rotary layout
(within each head, the two halves interleaved): :func:`gguf_qk_heads` names those weights with
their head counts and :func:`unpermute_rows` undoes it at read, on the quantized rows as stored
(a GGML row is whole blocks, so rows move without dequantizing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import torch

from core.errors import FileFormatError
from core.quant.tensor import QuantizedWeight

#: llama.cpp tensor name part -> transformers name part, per layer (``blk.N.<part>``)
_GGUF_LAYER: Final = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
}
#: the norm after attention is ``ffn_norm`` in Llama/Qwen files; Gemma's four norms have their own
_GGUF_PLAIN_NORMS: Final = {"ffn_norm": "post_attention_layernorm"}
_GGUF_GEMMA_NORMS: Final = {
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_GGUF_GLOBAL: Final = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_GGUF_KEY = re.compile(r"blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")
#: llama.cpp architectures whose files load
GGUF_ARCHES: Final = ("qwen2", "qwen3", "qwen2vl", "gemma2", "gemma3", "llama")
#: those whose q/k rows llama.cpp permutes for its rotary layout (Llama-3, Mistral Small 3)
PERMUTED_ARCHES: Final = ("llama",)
GEMMA_GGUF_ARCHES: Final = ("gemma2", "gemma3")


def llm_transformers_names(names: list[str], arch: object) -> dict[str, str] | None:
    """``{transformers name: GGUF name}`` for a llama.cpp-named decoder LLM of ``arch`` (the file's
    ``general.architecture``), or None when the names are not a loadable LLM's."""
    if arch not in GGUF_ARCHES or "token_embd.weight" not in names:
        return None
    if not any(n.startswith("blk.0.attn_q.") for n in names):
        return None
    norms = _GGUF_GEMMA_NORMS if arch in GEMMA_GGUF_ARCHES else _GGUF_PLAIN_NORMS
    out: dict[str, str] = {}
    for name in names:
        m = _GGUF_KEY.match(name)
        if m is not None:
            layer, part, kind = m.groups()
            mapped = _GGUF_LAYER.get(part) or norms.get(part)
            new = f"model.layers.{layer}.{mapped}.{kind}" if mapped else name
        else:
            stem, _, kind = name.rpartition(".")
            new = f"{_GGUF_GLOBAL[stem]}.{kind}" if stem in _GGUF_GLOBAL else name
        out[new] = name
    return out


def gguf_plus_one_keys(renamed: dict[str, str], arch: object) -> list[str]:
    """The (transformers-named) weights a GGUF file of ``arch`` stores as ``1 + w``: every norm of
    a Gemma (llama.cpp's Gemma conversion adds Gemma's offset into them)."""
    if arch not in GEMMA_GGUF_ARCHES:
        return []
    return sorted(k for k in renamed if k.endswith("norm.weight"))


def gguf_qk_heads(renamed: Mapping[str, str], arch: object, metadata: Mapping[str, Any]) -> dict[str, int]:
    """The (transformers-named) q and k weights llama.cpp permuted, with the head count each was
    permuted by (q: the heads, k: the key/value heads); empty for other architectures."""
    if arch not in PERMUTED_ARCHES:
        return {}
    heads = metadata.get(f"{arch}.attention.head_count")
    kv = metadata.get(f"{arch}.attention.head_count_kv", heads)
    if not isinstance(heads, int) or not isinstance(kv, int) or heads <= 0 or kv <= 0:
        raise FileFormatError(
            "this Llama-architecture GGUF file does not say its attention head counts",
            why=f"{arch}.attention.head_count is needed to undo llama.cpp's query/key row order",
            fix="use a GGUF converted by llama.cpp's own converter, or the model's safetensors file",
            code="invalid_header",
        )
    out = {}
    for key in renamed:
        if key.endswith("self_attn.q_proj.weight"):
            out[key] = heads
        elif key.endswith("self_attn.k_proj.weight"):
            out[key] = kv
    return out


def unpermute_rows(t: torch.Tensor, n_head: int) -> torch.Tensor:
    """transformers' row order of a q or k weight llama.cpp stored as, per head, the two rotary
    halves interleaved (its converter's ``permute``); quantized weights keep their blocks."""
    shape = t.qshape if isinstance(t, QuantizedWeight) else t.shape
    rows = int(shape[0])
    if rows % (2 * n_head):
        raise FileFormatError(
            f"a {rows}-row attention weight cannot hold {n_head} heads",
            why="the file's head count does not divide its query/key weights",
            fix="get the file again",
            code="invalid_shape",
        )
    d = rows // n_head
    h = torch.arange(n_head)[:, None, None] * d
    s = torch.arange(2)[None, :, None]
    i = torch.arange(d // 2)[None, None, :]
    index = (h + 2 * i + s).reshape(-1)  # transformers row (head, half, i) <- llama.cpp row (head, i, half)
    if isinstance(t, QuantizedWeight):
        raw = t.raw().reshape(rows, -1)[index].reshape(-1)
        return QuantizedWeight(raw, t.qtype, tuple(t.qshape))
    return t[index]
