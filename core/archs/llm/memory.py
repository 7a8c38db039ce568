"""Activation memory of a decoder-LLM encoder forward, derived from its shapes.

Per prompt row of ``T`` tokens, with ``D`` the width, ``F`` the MLP width, ``Q``/``K`` the query
and key/value widths (heads x head width) and ``d`` the head width, the live activations peak in
one layer (the stack keeps only the residual stream between layers) at the larger of

* the MLP: the residual and its norm (2 D), the gate, its activation, the up projection and their
  product (4 F), the norm's float32 temporaries (2 D): ``4 D + 4 F``;
* the attention: residual, norm and output (3 D), the queries, keys, values and the attention
  output at the query heads' width (4 Q), the keys and values as projected (2.5 K), and with
  q/k norms and grouped heads one more Q (an upper bound there: measured 10-15 % lower);

plus, once per forward whatever the rows, the RoPE tables (2 d) and the positions (2) per token,
and the additive causal mask (``T x T``, one per row: the padding mask is added to it). Elements
times the compute dtype's bytes. Measured exactly by
``core.memory.tracking.ActivationTracker`` on small shapes (the MLP and attention regimes apart);
checked at Qwen3-4B's and Gemma-2-2B's real widths in tests/core/memory/test_llm_activations.py.
For every released encoder the MLP term is the peak (F is 3-4 x D).
"""

from __future__ import annotations

from core.models.llm import LlmConfig


def per_token_elements(c: LlmConfig) -> float:
    """Live elements per token of one prompt row at the layer's peak (the RoPE tables excluded)."""
    q, k = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    mlp = 4 * c.hidden_size + 4 * c.intermediate_size
    attention = 3 * c.hidden_size + 4 * q + 2.5 * k + (q if c.qk_norm and k < q else 0)
    return max(mlp, attention)


def shared_token_elements(c: LlmConfig) -> int:
    """Elements per token made once per forward for every row: RoPE's cos and sin, the positions."""
    return 2 * c.head_dim + 2


def activation_bytes(c: LlmConfig, tokens: int, batch: int = 1, dtype_bytes: int = 4) -> int:
    """Peak activation bytes of one forward over ``batch`` rows of ``tokens`` (weights excluded)."""
    if min(tokens, batch, dtype_bytes) < 1:
        raise ValueError(f"tokens, batch and dtype bytes must be positive: {tokens}, {batch}, {dtype_bytes}")
    rows = batch * tokens * (per_token_elements(c) + tokens)
    elements = rows + tokens * shared_token_elements(c)
    return int(dtype_bytes * elements)
