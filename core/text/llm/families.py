"""The decoder-LLM towers' records, by the import path the text layer uses: they live in
``core.archs.llm.towers`` (architecture packages name them in their conventions, and a package
never imports the text layer)."""

from core.archs.llm.towers import (
    GEMMA_BOS,
    GEMMA_PAD,
    LUMINA2_GEMMA2,
    LUMINA2_SYSTEM_PROMPTS,
    LUMINA2_TOWER,
    QWEN_PAD,
    Z_IMAGE_QWEN3,
    Z_IMAGE_TEMPLATE,
    Z_IMAGE_TOWER,
    LlmTowerSpec,
    TokenizerKind,
    lumina2_gemma2,
)

__all__ = [
    "GEMMA_BOS",
    "GEMMA_PAD",
    "LUMINA2_GEMMA2",
    "LUMINA2_SYSTEM_PROMPTS",
    "LUMINA2_TOWER",
    "QWEN_PAD",
    "Z_IMAGE_QWEN3",
    "Z_IMAGE_TEMPLATE",
    "Z_IMAGE_TOWER",
    "LlmTowerSpec",
    "TokenizerKind",
    "lumina2_gemma2",
]
