"""Text encoding: tokenizers, prompt weighting and per-family conditioning (ComfyUI's
CLIPTextEncode). See docs/text.md."""

from core.text.cache import CacheKey, ConditioningCache
from core.text.chunking import ChunkSpec, TokenizedPrompt, WeightedToken, tokenize_weighted
from core.text.clip_tokenizer import ClipTokenizer, TextCleaning
from core.text.conditioning import (
    FAMILIES,
    FLUX_DEFAULT_GUIDANCE,
    EncodeOptions,
    PromptConditioning,
    PromptEncoder,
    TextEncoders,
    TextFamily,
    sdxl_adm,
    sdxl_refiner_adm,
)
from core.text.prompt import WeightedText, parse_weights
from core.text.t5_tokenizer import T5Tokenizer, T5TokenizerSearch, find_t5_tokenizer

__all__ = [
    "FAMILIES",
    "FLUX_DEFAULT_GUIDANCE",
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
    "sdxl_adm",
    "sdxl_refiner_adm",
    "tokenize_weighted",
]
