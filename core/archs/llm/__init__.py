"""The decoder-LLM text encoders' loading parts: the ``Architecture`` record (file layouts ->
``core.models.llm`` keys), llama.cpp's GGUF names. Their prompt side is ``core.text.llm``."""

from core.archs.llm.layout import LLM_ARCHITECTURE, LLM_FAMILIES, llm_transformers_names

__all__ = ["LLM_ARCHITECTURE", "LLM_FAMILIES", "llm_transformers_names"]
