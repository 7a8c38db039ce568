"""transformers' own models as references for core.models.llm: real-width, few-layer, random weights."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from core.models.llm import LlmConfig, LlmTextModel

SMALL_VOCAB = 512  # the vocabulary is not a width: kept small so the embedding stays cheap


def hf_config(family: str, cfg: LlmConfig, **extra: Any) -> Any:
    """The transformers config of the same network (``cfg``'s widths, depth and facts)."""
    import transformers as tf

    common: dict[str, Any] = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_norm_eps,
        max_position_embeddings=40960,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    rope: dict[str, Any] = extra.pop(
        "rope_parameters", {"rope_type": "default", "rope_theta": cfg.rope_theta}
    )
    if cfg.arch == "qwen3":
        return tf.Qwen3Config(**common, rope_parameters=rope, **extra)
    if cfg.arch == "qwen2":
        return tf.Qwen2_5_VLTextConfig(**common, rope_parameters=rope, **extra)
    if cfg.arch == "llama" and family.startswith("mistral"):
        return tf.MistralConfig(**common, rope_parameters=rope, sliding_window=None, **extra)
    if cfg.arch == "llama":
        return tf.LlamaConfig(**common, rope_parameters=rope, **extra)
    if cfg.arch == "gemma2":
        return tf.Gemma2Config(
            **common,
            rope_parameters=rope,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=cfg.query_pre_attn_scalar,
            **extra,
        )
    if cfg.arch == "gemma3":
        return tf.Gemma3TextConfig(
            **common,
            rope_parameters=rope,
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=cfg.query_pre_attn_scalar,
            **extra,
        )
    raise AssertionError(cfg.arch)


def _cpu(cls: type[nn.Module], hf_cfg: Any) -> nn.Module:
    with torch.device("cpu"):
        return cls(hf_cfg)


def hf_model(family: str, hf_cfg: Any, attn: str = "sdpa") -> nn.Module:
    import transformers as tf

    classes = {
        "qwen3": tf.Qwen3Model,
        "gemma2": tf.Gemma2Model,
        "gemma3_text": tf.Gemma3TextModel,
        "llama": tf.LlamaModel,
        "mistral": tf.MistralModel,
        "qwen2_5_vl_text": tf.Qwen2_5_VLTextModel,
    }
    hf_cfg._attn_implementation = attn
    with torch.device("meta"):  # no init: every tensor is filled below
        model = classes[hf_cfg.model_type](hf_cfg)
    model.to_empty(device="cpu")
    for name, module in list(model.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding"):  # its tables, computed again on the CPU
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, _cpu(type(module), hf_cfg))
        if "embed_scale" in getattr(module, "_buffers", {}):
            module._buffers["embed_scale"] = torch.tensor(hf_cfg.hidden_size**0.5)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norms around their identity (1 + w for Gemma: w around 0), biases small
                base = 0.0 if ("gemma" in hf_cfg.model_type or name.endswith("bias")) else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (p.shape[-1] ** -0.5))
    return model.eval()


def ours_from(hf: nn.Module, cfg: LlmConfig) -> LlmTextModel:
    ours = LlmTextModel(cfg, device="meta")
    state = {"model." + k: v for k, v in hf.state_dict().items() if "rotary" not in k}
    ours.load_state_dict(state, assign=True, strict=True)
    return ours.eval()


def real_width(family: str, layers: int, **changes: Any) -> LlmConfig:
    return dataclasses.replace(LlmConfig.preset(family), vocab_size=SMALL_VOCAB, num_layers=layers, **changes)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())  # both detached by the callers
