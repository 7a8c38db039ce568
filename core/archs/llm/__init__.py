"""The decoder-LLM text encoders' loading parts: the ``Architecture`` record (file layouts ->
``core.models.llm`` keys); llama.cpp's GGUF names are read in ``core.files.gguf_llm``. Their
prompt side is ``core.text.llm``."""

from core.archs.llm.layout import LLM_ARCHITECTURE, LLM_FAMILIES

__all__ = ["LLM_ARCHITECTURE", "LLM_FAMILIES"]
