"""The decoder-LLM text encoders' file layouts -> the network's keys (``core.models.llm``).

Layouts (the ``layout`` detection gives, ``core.detect.encoder_text.read_llm``):

* ``transformers``: ``model.embed_tokens.weight``, ``model.layers.N....``, ``model.norm.weight`` -
  Hugging Face single files and shards, and Comfy-Org's ``text_encoders/*.safetensors`` repacks
  (``qwen_3_4b.safetensors``, ``gemma_2_2b.safetensors``, ``*_fp8_scaled``): the module's own keys.
* ``transformers-vl``: ``model.language_model.*`` (transformers 4.50+'s Qwen2.5-VL / Gemma-3 files).
* ``bare``: the same without ``model.`` (``layers.N....``, ``embed_tokens.weight``).
* GGUF files are indexed under transformers names (:func:`llm_transformers_names`), so they load
  as ``transformers``; llama.cpp stores Gemma's norm weights as ``1 + w``, undone at read.

Keys a text encoder never uses are dropped by every conversion: the LM head, a vision tower and its
projector (Qwen2.5-VL ``visual.*``, Gemma-3 ``vision_tower.*``), the SentencePiece model Comfy-Org's
Gemma files carry as the uint8 tensor ``spiece_model`` (read by the tokenizer, not the network).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Final

import torch

from core.archs.layouts import Architecture, Shapes, Tensors
from core.models.llm import LlmConfig, LlmTextModel

#: every encoder family the network loads (``core.detect.encoder_families.LLM_SPECS``' ids)
LLM_FAMILIES: Final = (
    "qwen3-0.6b",
    "qwen3-4b",
    "qwen3-8b",
    "qwen2.5-vl-3b",
    "qwen2.5-vl-7b",
    "gemma2-2b",
    "gemma3-4b",
    "llama3.1-8b",
    "mistral3-24b",
)
#: file keys that belong to no part of the text encoder (dropped, never reported as unexpected)
UNUSED_PREFIXES: Final = (
    "lm_head.",
    "visual.",
    "model.visual.",
    "vision_tower.",
    "model.vision_tower.",
    "multi_modal_projector.",
    "model.multi_modal_projector.",
    "spiece_model",
    "tokenizer.",
)
_BASES: Final = {"transformers": "model.", "transformers-vl": "model.language_model.", "bare": ""}


class _Renamed(Mapping[str, torch.Tensor]):
    """A lazy view of ``tensors`` under the module's names (each tensor read only when asked)."""

    def __init__(self, tensors: Tensors, layout: str) -> None:
        self._src = tensors
        base = _BASES[layout]
        self._names: dict[str, str] = {}
        for key in tensors:
            if key.startswith(UNUSED_PREFIXES):
                continue
            if base and key.startswith(base):
                self._names["model." + key[len(base) :]] = key
            elif not base and not key.startswith("model."):
                self._names["model." + key] = key
            else:
                self._names[key] = key

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._src[self._names[key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _renamed(tensors: Tensors, family: str, *, layout: str) -> Tensors:
    return _Renamed(tensors, layout)


def _configure(shapes: Shapes, family: str) -> LlmConfig:
    return LlmConfig.from_shapes(shapes, family)


LLM_ARCHITECTURE: Final = Architecture(
    "llm-text",
    "text_encoder",
    LLM_FAMILIES,
    configure=_configure,
    build=lambda cfg, device, dtype: LlmTextModel(cfg, device=device, dtype=dtype),
    to_module={layout: partial(_renamed, layout=layout) for layout in _BASES},
)

# -- GGUF (llama.cpp names) -------------------------------------------------------------------------

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


def llm_transformers_names(names: list[str], arch: str) -> dict[str, str] | None:
    """``{transformers name: GGUF name}`` for a llama.cpp-named decoder LLM of ``arch`` (the file's
    ``general.architecture``), or None when the names are not an LLM's."""
    if "token_embd.weight" not in names or not any(n.startswith("blk.0.attn_q.") for n in names):
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


def stored_plus_one(key: str, arch: str) -> bool:
    """Whether a GGUF file of ``arch`` stores this (transformers-named) weight as ``1 + w``
    (llama.cpp's Gemma conversion adds Gemma's offset into every norm weight)."""
    return arch in GEMMA_GGUF_ARCHES and key.endswith("norm.weight")
