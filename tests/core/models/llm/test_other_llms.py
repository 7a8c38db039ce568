"""Gemma-3, Llama-3.1, Mistral-3 and Qwen2.5-VL's text model against transformers' own
(Gemma3TextModel, LlamaModel, MistralModel, Qwen2_5_VLTextModel) at real width, one or two layers,
random weights: hidden states to 1e-4 relative in float32."""

from __future__ import annotations

import pytest
import torch

from core.models.llm import LLAMA31_SCALING
from tests.core.models.llm.reference import hf_config, hf_model, ours_from, real_width, relative_error

pytestmark = pytest.mark.usefixtures("one_thread")


#: the gated MLP is the module Qwen3 and Gemma-2 prove at full width; here it is narrowed so four
#: more 4-24B-wide networks stay cheap on a CPU (every other width is the real one)
MLP = 2048


def _check(family: str, layers: int, attn: str = "sdpa", length: int = 19, **changes: object) -> None:
    cfg = real_width(family, layers, intermediate_size=MLP, **changes)
    extra: dict[str, object] = {}
    if cfg.arch == "gemma3":
        extra = dict(
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": cfg.rope_theta},
                "sliding_attention": {"rope_type": "default", "rope_theta": cfg.rope_local_theta},
            },
            sliding_window=cfg.sliding_window,
            layer_types=["sliding_attention" if cfg.sliding(i) else "full_attention" for i in range(layers)],
        )
    if cfg.rope_scaling is not None and cfg.rope_scaling.kind == "llama3":
        s = cfg.rope_scaling
        extra = dict(
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": cfg.rope_theta,
                "factor": s.factor,
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_positions,
            }
        )
    with torch.no_grad():
        hf = hf_model(family, hf_config(family, cfg, **extra), attn)
        ours = ours_from(hf, cfg)
        ids = torch.randint(0, 512, (2, length), generator=torch.Generator().manual_seed(2))
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length - 5 :] = 0
        ref = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        out = ours(ids, mask, taps=tuple(range(len(ref))), dtype=torch.float32)
    for tap, (o, r) in enumerate(zip(out, ref, strict=True)):
        assert relative_error(o[0], r[0]) < 1e-4, f"{family} hidden state {tap}"
        assert relative_error(o[1, : length - 5], r[1, : length - 5]) < 1e-4, f"{family} padded, state {tap}"


def test_gemma3_4b_local_and_global_layers_match_transformers() -> None:
    """Two layers: a sliding one (RoPE base 1e4) and, with a period of 2, a global one (1e6, linear
    scaling 8); a window of 6 shorter than the prompt, as 1024 is for long prompts."""
    _check("gemma3-4b", 2, attn="eager", sliding_window=6, sliding_period=2)


def test_llama31_8b_matches_transformers_with_and_without_llama3_rope() -> None:
    _check("llama3.1-8b", 1)  # ComfyUI's plain RoPE = transformers' default rope type
    _check("llama3.1-8b", 1, rope_scaling=LLAMA31_SCALING)


def test_mistral3_24b_matches_transformers() -> None:
    _check("mistral3-24b", 1)


def test_qwen25_vl_7b_text_matches_transformers() -> None:
    _check("qwen2.5-vl-7b", 1)
