"""The decoder-LLM text encoders' loading parts: the ``Architecture`` record (file layouts ->
``core.models.llm`` keys); llama.cpp's GGUF names are read in ``core.files.gguf_llm``. Their
prompt side is ``core.text.llm``."""

from core.archs.llm.layout import LLM_ARCHITECTURE, LLM_FAMILIES

#: read by ``core.archs.catalog`` (the loaders reach the record through it)
ENCODER_ARCHITECTURES = (LLM_ARCHITECTURE,)

__all__ = ["ENCODER_ARCHITECTURES", "LLM_ARCHITECTURE", "LLM_FAMILIES"]
