"""Decoder-LLM text encoders (Qwen3, Qwen2.5 text, Gemma-2/-3, Llama-3.1, Mistral-3) built from
``core.ops`` layers; see core/text/llm for their tokenizers, templates and layer taps."""

from core.models.llm.config import LLAMA31_SCALING, PRESETS, LlmConfig, RopeScaling
from core.models.llm.network import LlmTextModel

__all__ = ["LLAMA31_SCALING", "PRESETS", "LlmConfig", "LlmTextModel", "RopeScaling"]
