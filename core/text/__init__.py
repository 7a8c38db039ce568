"""Text encoding: tokenizers, prompt weighting and per-family conditioning (ComfyUI's
CLIPTextEncode). See docs/text.md."""

from typing import Any

from core.archs.catalog import find_in_packages
from core.text.cache import CacheKey, ConditioningCache
from core.text.chunking import ChunkSpec, TokenizedPrompt, WeightedToken, tokenize_weighted
from core.text.clip_tokenizer import ClipTokenizer, TextCleaning
from core.text.conditioning import (
    FAMILIES,
    EncodeOptions,
    PromptConditioning,
    PromptEncoder,
    TextEncoders,
    TextFamily,
)
from core.text.prompt import WeightedText, parse_weights
from core.text.t5_tokenizer import T5Tokenizer, T5TokenizerSearch, find_t5_tokenizer

__all__ = [
    "FAMILIES",
    "CacheKey",
    "ChunkSpec",
    "ClipTokenizer",
    "ConditioningCache",
    "EncodeOptions",
    "PromptConditioning",
    "PromptEncoder",
    "T5Tokenizer",
    "T5TokenizerSearch",
    "TextCleaning",
    "TextEncoders",
    "TextFamily",
    "TokenizedPrompt",
    "WeightedText",
    "WeightedToken",
    "find_t5_tokenizer",
    "parse_weights",
    "tokenize_weighted",
]


def __getattr__(name: str) -> Any:
    """Conventions' helpers (``sdxl_adm`` ...) by the import path older callers use."""
    return find_in_packages("text", name)
