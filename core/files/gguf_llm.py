"""llama.cpp's names for decoder-LLM text encoders in GGUF files -> the transformers names
``core.models.llm`` uses (``blk.N.attn_q.weight`` -> ``model.layers.N.self_attn.q_proj.weight``).

llama.cpp's converter adds 1 to every Gemma norm weight (its RMSNorm has no ``1 + w``):
:func:`gguf_plus_one_keys` names them, and loading subtracts it again. Llama and Mistral files have
their query/key rows permuted for llama.cpp's rotary layout; that is not undone yet, so their
architectures are not renamed (the file stays unknown and is refused in words).
"""

from __future__ import annotations

import re
from typing import Final

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
#: llama.cpp architectures whose files load (Llama/Mistral files have their q/k rows permuted for
#: llama.cpp's rotary layout: not undone yet, so they are refused in words)
GGUF_ARCHES: Final = ("qwen2", "qwen3", "qwen2vl", "gemma2", "gemma3")
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
